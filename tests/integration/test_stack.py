"""`rtrl up / status / down` against the real Tansu broker: idempotent, clear errors, nothing orphaned."""

import json
import subprocess
from pathlib import Path

import pytest

from infra.argv import rtrl_argv
from infra.stack.process import StackError
from infra.stack.stack import Stack
from schemas import TOPICS
from tests.conftest import make_config

pytestmark = pytest.mark.integration
REPO = Path(__file__).parents[2]


def cli(cfg, *args: str) -> subprocess.CompletedProcess:
    overrides = [f"state_dir={cfg.state_dir}", f"kafka.port={cfg.kafka.port}", f"mlflow.ui_port={cfg.mlflow.ui_port}",
                 f"kafka.storage_engine={cfg.kafka.storage_engine}"]
    argv = rtrl_argv(*args, overrides=overrides)
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=180)


def test_up_is_idempotent_and_down_leaves_no_process(tmp_path):
    cfg = make_config(tmp_path, "kafka.storage_engine=s3")  # broker + object store: two processes to account for
    first = cli(cfg, "up")
    assert first.returncode == 0, first.stderr
    assert f"topics: {len(TOPICS)} ready ({len(TOPICS)} created)" in first.stdout
    st = Stack(cfg)
    pids = [st.broker.proc.info()["pid"], st.broker.store.proc.info()["pid"]]
    second = cli(cfg, "up")
    assert second.returncode == 0 and f"({0} created)" in second.stdout
    assert [st.broker.proc.info()["pid"], st.broker.store.proc.info()["pid"]] == pids  # nothing new started

    status = json.loads(cli(cfg, "status", "--json").stdout)["stack"]
    assert status["broker_healthy"] is True and status["services"]["broker"]["running"]

    down = cli(cfg, "down")
    assert down.returncode == 0 and "broker" in down.stdout
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert "nothing was running" in cli(cfg, "down").stdout


def test_up_reports_a_port_taken_by_another_process(tmp_path, stack):
    cfg = make_config(tmp_path, f"kafka.port={stack.cfg.kafka.port}")
    out = cli(cfg, "up")
    assert out.returncode == 1
    assert f"port {stack.cfg.kafka.port} on 127.0.0.1 is taken by another process" in out.stderr


def test_host_that_is_not_on_this_machine_is_a_clear_error(tmp_path):
    cfg = make_config(tmp_path, "kafka.host=203.0.113.1", "kafka.storage_engine=memory")
    with pytest.raises(StackError, match="is '203.0.113.1' an address of this machine"):
        Stack(cfg).broker.start()


def test_broker_that_dies_at_start_is_reported_with_its_log(tmp_path, monkeypatch):
    fake = tmp_path / "tansu"
    fake.write_text("#!/bin/sh\necho 'error: storage engine unavailable' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr("infra.stack.broker.tansu_binary", lambda: fake)
    cfg = make_config(tmp_path / "s", "kafka.storage_engine=memory")
    with pytest.raises(StackError, match="(?s)broker exited during start-up; last lines of .*storage engine unavail"):
        Stack(cfg).broker.start()


def test_broker_restart_keeps_acknowledged_messages(private_stack):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    bootstrap = private_stack.cfg.kafka.bootstrap()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(100):
        producer.send("dead-letter", key=b"k", value=b"m%d" % i).get(timeout=10)
    producer.close()
    private_stack.broker.proc.kill()  # a crash, not a clean stop
    private_stack.broker.start()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition("dead-letter", p) for p in range(private_stack.cfg.kafka.partitions_for("dead-letter"))]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    seen = set()
    for _ in range(100):
        for records in consumer.poll(timeout_ms=200).values():
            seen.update(r.value for r in records)
        if len(seen) == 100:
            break
    consumer.close()
    assert seen == {b"m%d" % i for i in range(100)}


@pytest.mark.slow
@pytest.mark.full   # an `mlflow server` process under the stack: the default tier's is test_registry_server.py
def test_mlflow_ui_serves_health_on_localhost_and_stops_with_down(tmp_path):
    import urllib.request

    cfg = make_config(tmp_path, "kafka.storage_engine=memory")
    out = cli(cfg, "up", "--mlflow-ui")
    assert out.returncode == 0, out.stderr
    url = f"http://127.0.0.1:{cfg.mlflow.ui_port}"
    assert f"mlflow: UI at {url}" in out.stdout
    with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
        assert r.status == 200
    pid = Stack(cfg).mlflow.ui.info()["pid"]
    assert "mlflow-ui" in cli(cfg, "down").stdout
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
