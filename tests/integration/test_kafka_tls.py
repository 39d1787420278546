"""Kafka over mutual TLS, end to end: the embedded broker behind the stunnel terminator (`kafka.tls_terminator_dir`),
certificates made here by a local CA. The same events go SDK → collector (HTTP) → Kafka → archiver and the cycle
reward job (`rtrl rewards`), once over mTLS and once in plaintext; the reward rows and the archived events are the
same. A client without a certificate, or with one from another CA, is refused, and rtrl says why."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

from infra.argv import rtrl_argv
from infra.config import load_config
from infra.stack.stack import Stack
from infra.stack.tls_proxy import Pki, make_test_pki
from instrumentation import TelemetryClient
from instrumentation.collector_client import CollectorTransport
from pipelines.archive.reader import read_events
from schemas.api_keys import KeyStore
from schemas.kafka_clients import explain_unreachable, kafka_client_args, tls_refusal
from schemas.reward_table import read_reward_table
from tests.conftest import free_port, free_port_pair
from tests.integration.test_rewards_cycle import part
from tests.unit.rewards.builders import T0

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).parents[2]
FAST_FAIL = "kafka.extra.bootstrap_timeout_ms=4000"   # a refused client gives up after 4 s, not kafka-python's 30


@pytest.fixture(scope="module")
def pkis(tmp_path_factory) -> tuple[Pki, Pki]:
    """(ours: the CA the terminator trusts, its server and client certificates; another CA's, with its client)."""
    tmp = tmp_path_factory.mktemp("pki")
    return make_test_pki(tmp / "ours"), make_test_pki(tmp / "other", name="other")


@pytest.fixture(scope="module")
def events():
    """24 requests with their follow-ups, edits, rejections and snapshots (test_rewards_cycle's), moved to end about
    a day ago: within the collector's accepted skew, and far enough back that rows mature in one cycle."""
    evs = part(0, 24)
    shift = (datetime.now(timezone.utc) - timedelta(days=1)).replace(minute=0, second=0, microsecond=0) - T0
    return [e.model_copy(update={"event_time": e.event_time + shift}) for e in evs]


def settings(state: Path, *extra: str) -> list[str]:
    return [f'state_dir="{state}"', f"kafka.port={free_port_pair()}", f"collector.port={free_port()}",
            f"mlflow.ui_port={free_port()}", *extra]


class Run:
    """One stack (the broker, the collector) under `overrides`; `ingest` then `archive_and_reward` through it."""

    def __init__(self, tmp: Path, overrides: list[str]):
        self.tmp, self.overrides = tmp, overrides
        self.cfg = load_config(None, overrides)
        self.stack = Stack(self.cfg)

    def rtrl(self, *args: str) -> list[str]:
        return rtrl_argv(*args, overrides=self.overrides)

    def ingest(self, events) -> dict:
        """SDK → collector over HTTP → Kafka; the SDK's stats once every event was acknowledged."""
        cfg = self.cfg
        key = KeyStore(cfg.path_or_default(cfg.collector.api_keys_file, "collector_keys.json")).create(
            "tls-e2e", org="*", role="serving")       # role serving: trajectories
        out = subprocess.run(self.rtrl("collector", "--detach"), cwd=REPO, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        sdk = cfg.sdk.model_copy(update={"linger_ms": 5, "send_timeout_s": 10})
        client = TelemetryClient(CollectorTransport(f"http://127.0.0.1:{cfg.collector.port}", key, timeout_s=10),
                                 sdk, self.tmp / "spool", name="tls-e2e")
        try:
            for e in events:
                assert client.emit(e)
            assert client.flush(60), client.stats()
            return client.stats()
        finally:
            client.close(10)

    def archive_and_reward(self) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
        """The archiver (until idle) and cycle c1's reward job, side by side: (archived events, c1's reward rows,
        the job's summary)."""
        archiver = subprocess.Popen(self.rtrl("archive", "--until-idle", "2"), cwd=REPO, stdout=subprocess.DEVNULL,
                                    stderr=open(self.tmp / "archive.log", "w"))
        rewards = subprocess.run(self.rtrl("rewards", "--cycle", "c1", "--idle", "1", "--shards", "2"), cwd=REPO,
                                 capture_output=True, text=True, timeout=300)
        assert rewards.returncode == 0, rewards.stderr[-3000:]
        assert archiver.wait(timeout=180) == 0, (self.tmp / "archive.log").read_text()[-3000:]
        cfg = self.cfg
        archived = read_events(cfg.path_or_default(cfg.archive.output_dir, "archive"), dedupe=False)
        rows = read_reward_table(cfg.state_path / "rewards" / "table", "c1")
        return archived, rows, json.loads(rewards.stdout)["rewards"]

    def __enter__(self):
        self.stack.up(log=lambda *_: None)
        return self

    def __exit__(self, *exc):
        self.stack.down(log=lambda *_: None)


@pytest.fixture(scope="module")
def mtls(pkis, events, tmp_path_factory):
    """The pipeline over mutual TLS: (run, SDK stats, archived events, reward rows, summary)."""
    ours, _ = pkis
    tmp = tmp_path_factory.mktemp("mtls")
    run = Run(tmp, settings(tmp / "state", f'kafka.tls_terminator_dir="{ours.folder}"', *ours.client_overrides()))
    with run:
        stats = run.ingest(events)
        yield (run, stats, *run.archive_and_reward())


@pytest.fixture(scope="module")
def plaintext(events, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plaintext")
    run = Run(tmp, settings(tmp / "state"))
    with run:
        run.ingest(events)
        yield run.archive_and_reward()


def test_the_stack_serves_kafka_only_through_the_tls_terminator(mtls):
    run = mtls[0]
    kafka = run.cfg.kafka
    status = run.stack.status()
    assert status["services"]["kafka-tls"]["running"] and status["broker_healthy"]
    backend = run.stack.broker.proc.info()["backend_port"]
    assert backend != kafka.port
    # the advertised address is the terminator's: metadata over TLS names it, not the plaintext backend
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(**kafka_client_args(kafka), client_id="tls-test")
    try:
        brokers = admin.describe_cluster()["brokers"]
    finally:
        admin.close()
    assert [(b["host"], b["port"]) for b in brokers] == [(kafka.host, kafka.port)]


def test_rows_and_archive_over_mutual_tls_equal_the_plaintext_run(mtls, plaintext, events):
    _, stats, archived, rows, summary = mtls
    plain_archived, plain_rows, plain_summary = plaintext
    assert stats["sent"] == len(events) and sum(stats["dropped"].values()) == 0, stats
    assert summary["events_read"] == len(events) == plain_summary["events_read"]
    assert rows.height >= 12, "most of the 24 requests mature in the cycle"
    # every column: nothing in a reward row depends on the transport or the wall clock
    assert rows.sort("request_id").to_dicts() == plain_rows.sort("request_id").to_dicts()
    # the job's summary too, but for the run's own paths (each run has its state dir) and its wall time
    local = ("out", "dead_letter_file", "seconds")
    assert {k: v for k, v in summary.items() if k not in local} == \
        {k: v for k, v in plain_summary.items() if k not in local}
    # the archive holds every event once, the same in both runs (their topic, partition and offset included) but
    # for `received_time`: the collector's clock at receipt, which differs between any two runs
    assert archived.height == len(events) and archived["event_id"].n_unique() == len(events)
    assert (archived.drop("received_time").sort("event_id").to_dicts()
            == plain_archived.drop("received_time").sort("event_id").to_dicts())


def _handshake_error(pki: Pki, port: int, cert: Pki | None) -> str:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki.ca)
    if cert is not None:
        ctx.load_cert_chain(cert.client_cert, cert.client_key)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.settimeout(2)
        with pytest.raises(ssl.SSLError) as refused:
            tls.recv(1)                  # TLS 1.3: the server refuses the client's certificate after the handshake
    return refused.value.reason


def test_a_client_without_a_certificate_or_with_another_cas_is_refused_with_a_clear_error(mtls, pkis, tmp_path):
    run = mtls[0]
    ours, other = pkis
    port = run.cfg.kafka.port
    assert _handshake_error(ours, port, None) == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    assert _handshake_error(ours, port, other) == "TLSV1_ALERT_UNKNOWN_CA"
    assert tls_refusal(run.cfg.kafka) is None, "our own certificate is accepted"

    # rtrl's own clients, configured against the terminator as an external cluster
    external = [f'state_dir="{tmp_path / "state"}"', f'kafka.bootstrap_servers="127.0.0.1:{port}"',
                'kafka.security_protocol="SSL"', f'kafka.ssl_cafile="{ours.ca}"', FAST_FAIL]
    other_cert = [f'kafka.ssl_certfile="{other.client_cert}"', f'kafka.ssl_keyfile="{other.client_key}"']
    no_cert = load_config(None, external).kafka
    assert tls_refusal(no_cert) == (
        f"Kafka at 127.0.0.1:{port} refused the TLS connection: the broker requires a client certificate (mutual "
        "TLS) and none is configured: set kafka.ssl_certfile and kafka.ssl_keyfile (TLSV13_ALERT_CERTIFICATE_REQUIRED)")
    wrong = explain_unreachable(load_config(None, [*external, *other_cert]).kafka)
    assert f"Kafka at 127.0.0.1:{port} refused the TLS connection: the broker refused the client certificate " \
           f"kafka.ssl_certfile = {other.client_cert} (TLSV1_ALERT_UNKNOWN_CA)" in wrong

    t0 = time.monotonic()
    up = subprocess.run(rtrl_argv("up", overrides=external), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert up.returncode == 1
    assert f"Kafka at 127.0.0.1:{port} refused the TLS connection: the broker requires a client certificate" \
           in up.stderr, up.stderr[-2000:]
    cycle = subprocess.run(rtrl_argv("rewards", "--cycle", "x", overrides=[*external, *other_cert]), cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    last = cycle.stderr.strip().splitlines()[-1]     # before it: kafka-python's own warnings, as it retried
    assert cycle.returncode == 1 and last.startswith(f"rtrl: Kafka at 127.0.0.1:{port} refused the TLS connection: "
                                                     "the broker refused the client certificate"), cycle.stderr[-2000:]
    assert "TLSV1_ALERT_UNKNOWN_CA" in last
    assert time.monotonic() - t0 < 60, "a refused client fails within its bootstrap timeout"


def test_the_terminator_setting_needs_ssl_clients_the_embedded_broker_and_its_files(pkis, tmp_path):
    from infra.config import ConfigError

    ours, _ = pkis
    base = [f'state_dir="{tmp_path}"', f'kafka.tls_terminator_dir="{ours.folder}"']
    for extra, says in [([], "security_protocol is PLAINTEXT: set it to SSL"),
                        ([*ours.client_overrides(), 'kafka.bootstrap_servers="h:9093"'], "fronts the embedded broker"),
                        ([*ours.client_overrides(), f'kafka.tls_terminator_dir="{tmp_path}"'],
                         "lacks ca.pem, server.pem, server.key")]:
        with pytest.raises(ConfigError, match=says):
            load_config(None, [*base, *extra])
    assert load_config(None, [*base, *ours.client_overrides()]).kafka.tls_terminator_dir == str(ours.folder)
