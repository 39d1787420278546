"""Kafka client settings in one place: every producer, consumer and admin client of rtrl, and Beam's
KafkaIO config, gets its bootstrap and security settings from `schemas.kafka_clients`; the SASL password never
shows in config, reprs, logs or errors."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from infra.config import load_config
from schemas import kafka_clients
from schemas.kafka_clients import Secret, kafka_client_args, kafka_consumer_config

REPO = Path(__file__).resolve().parents[3]
PASSWORD = "s3cr3t-\"pw\"-9f2c"
PACKAGES = ("schemas", "registry", "codetasks", "instrumentation", "pipelines", "trainer", "serving", "evals", "infra")
CLIENTS = ("KafkaProducer", "KafkaConsumer", "KafkaAdminClient")


def _pem(tmp_path: Path, name: str, body: str) -> str:
    p = tmp_path / name
    p.write_text(body)
    return str(p)


@pytest.fixture
def sasl_ssl(tmp_path, monkeypatch):
    """An RtrlConfig whose [kafka] is SASL_SSL + SCRAM-SHA-512 with a CA and a client certificate (mutual TLS)."""
    monkeypatch.setenv("RTRL_TEST_KAFKA_PW", PASSWORD)
    ca = _pem(tmp_path, "ca.pem", "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n")
    cert = _pem(tmp_path, "client.pem", "-----BEGIN CERTIFICATE-----\nC\n-----END CERTIFICATE-----\n")
    key = _pem(tmp_path, "client.key", "-----BEGIN PRIVATE KEY-----\nK\n-----END PRIVATE KEY-----\n")
    return load_config(None, [f'state_dir="{tmp_path / "state"}"', 'kafka.bootstrap_servers="b1:9093,b2:9093"',
                              'kafka.security_protocol="SASL_SSL"', 'kafka.sasl_mechanism="SCRAM-SHA-512"',
                              'kafka.sasl_username="rtrl"', 'kafka.sasl_password_env="RTRL_TEST_KAFKA_PW"',
                              f'kafka.ssl_cafile="{ca}"', f'kafka.ssl_certfile="{cert}"', f'kafka.ssl_keyfile="{key}"',
                              'kafka.extra={ssl_check_hostname=false}'])


EXPECTED = {"bootstrap_servers": "b1:9093,b2:9093", "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "rtrl", "sasl_plain_password": PASSWORD,
            "ssl_check_hostname": False}


def _assert_secured(kwargs: dict, cfg) -> None:
    for k, v in EXPECTED.items():
        assert kwargs.get(k) == v, (k, kwargs.get(k))
    for k in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        assert kwargs[k] == getattr(cfg.kafka, k)


# -- the functions ----------------------------------------------------------------------------------------------

def test_a_plain_bootstrap_is_plaintext():
    assert kafka_client_args("h:1") == {"bootstrap_servers": "h:1"}
    assert kafka_consumer_config("h:1") == {"bootstrap.servers": "h:1"}


def test_the_default_section_is_plaintext_to_the_embedded_broker(tmp_path):
    cfg = load_config(None, [f'state_dir="{tmp_path}"'])
    assert kafka_client_args(cfg.kafka) == {"bootstrap_servers": "127.0.0.1:19092", "security_protocol": "PLAINTEXT"}


def test_sasl_ssl_args(sasl_ssl):
    _assert_secured(kafka_client_args(sasl_ssl.kafka), sasl_ssl)


def test_password_from_a_file(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD + "\n")
    cfg = load_config(None, [f'state_dir="{tmp_path}"', 'kafka.security_protocol="SASL_PLAINTEXT"',
                             'kafka.sasl_mechanism="PLAIN"', 'kafka.sasl_username="u"',
                             f'kafka.sasl_password_file="{pw}"'])
    args = kafka_client_args(cfg.kafka)
    assert args["sasl_plain_password"] == PASSWORD and "ssl_cafile" not in args


def test_java_properties_for_kafkaio(sasl_ssl):
    conf = kafka_consumer_config(sasl_ssl.kafka)
    assert conf["bootstrap.servers"] == "b1:9093,b2:9093"
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                        'username="rtrl" password="s3cr3t-\\"pw\\"-9f2c";')
    assert conf["ssl.truststore.type"] == "PEM" and "BEGIN CERTIFICATE" in conf["ssl.truststore.certificates"]
    assert conf["ssl.keystore.type"] == "PEM" and "BEGIN PRIVATE KEY" in conf["ssl.keystore.key"]
    assert "BEGIN CERTIFICATE" in conf["ssl.keystore.certificate.chain"]
    assert PASSWORD not in repr(conf) and "BEGIN PRIVATE KEY" not in repr(conf)


def test_java_needs_a_pkcs8_key(sasl_ssl):
    Path(sasl_ssl.kafka.ssl_keyfile).write_text("-----BEGIN RSA PRIVATE KEY-----\nK\n-----END RSA PRIVATE KEY-----\n")
    with pytest.raises(ValueError, match="PKCS#8"):
        kafka_consumer_config(sasl_ssl.kafka)


def test_the_stream_jobs_kafkaio_gets_the_security_properties(sasl_ssl):
    from apache_beam.coders import RowCoder
    from apache_beam.portability.api import external_transforms_pb2

    from pipelines.rewards import stream_job

    src = stream_job.kafka_source(sasl_ssl.kafka, group_id="g")
    payload = external_transforms_pb2.ExternalConfigurationPayload.FromString(src._payload)
    conf = RowCoder(payload.schema).decode(payload.payload).consumer_config
    assert conf["bootstrap.servers"] == "b1:9093,b2:9093" and conf["group.id"] == "g"
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert "username=\"rtrl\"" in conf["sasl.jaas.config"] and conf["ssl.keystore.type"] == "PEM"


# -- validation -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sets, message", [
    (['kafka.security_protocol="SASL_SSL"', 'kafka.sasl_password_env="X"'], "needs sasl_mechanism and sasl_username"),
    (['kafka.security_protocol="SASL_SSL"', 'kafka.sasl_mechanism="PLAIN"', 'kafka.sasl_username="u"'],
     "exactly one of sasl_password_file and sasl_password_env"),
    (['kafka.sasl_username="u"'], "security_protocol is PLAINTEXT"),
    (['kafka.security_protocol="SSL"', 'kafka.ssl_cafile="/no/such/ca.pem"'], "is not a readable file"),
    (['kafka.security_protocol="SASL_SSL"', 'kafka.sasl_mechanism="GSSAPI"'], "sasl_mechanism"),
    (['kafka.security_protocol="TLS"'], "security_protocol"),
    (['kafka.sasl_password="literal"'], "sasl_password"),
    (['kafka.extra={sasl_plain_password="x"}'], "cannot go in extra"),
    (['kafka.extra={client_id="x"}'], "cannot go in extra"),
    (['kafka.topic_replication.trajectories=0'], "topic_replication"),
])
def test_bad_security_settings_are_refused_clearly(tmp_path, sets, message):
    with pytest.raises(Exception, match=message):
        load_config(None, [f'state_dir="{tmp_path}"', *sets])


def test_mutual_tls_needs_both_files(tmp_path):
    cert = _pem(tmp_path, "c.pem", "x")
    with pytest.raises(Exception, match="both ssl_certfile and ssl_keyfile"):
        load_config(None, [f'state_dir="{tmp_path}"', 'kafka.security_protocol="SSL"',
                           f'kafka.ssl_certfile="{cert}"'])


def test_a_missing_password_names_its_source_only(tmp_path, monkeypatch):
    monkeypatch.delenv("RTRL_TEST_NO_PW", raising=False)
    cfg = load_config(None, [f'state_dir="{tmp_path}"', 'kafka.security_protocol="SASL_PLAINTEXT"',
                             'kafka.sasl_mechanism="PLAIN"', 'kafka.sasl_username="u"',
                             'kafka.sasl_password_env="RTRL_TEST_NO_PW"'])
    with pytest.raises(ValueError, match="RTRL_TEST_NO_PW is not set"):
        kafka_client_args(cfg.kafka)


def test_extra_keys_are_accepted_by_every_kafka_python_client():
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    from infra.stack import config as stack_config

    common = (set(KafkaProducer.DEFAULT_CONFIG) & set(KafkaConsumer.DEFAULT_CONFIG)
              & set(KafkaAdminClient.DEFAULT_CONFIG))
    assert kafka_clients.EXTRA_CLIENT_KEYS <= common
    assert stack_config.EXTRA_CLIENT_KEYS == kafka_clients.EXTRA_CLIENT_KEYS
    assert stack_config.SecurityProtocol.__args__ == kafka_clients.SECURITY_PROTOCOLS
    assert stack_config.SaslMechanism.__args__ == kafka_clients.SASL_MECHANISMS


# -- the password is never shown --------------------------------------------------------------------------------

def test_the_password_is_not_in_the_configs_repr_or_dump(sasl_ssl):
    for text in (repr(sasl_ssl), str(sasl_ssl), repr(sasl_ssl.kafka), sasl_ssl.model_dump_json()):
        assert PASSWORD not in text


def test_the_password_is_not_in_logged_args(sasl_ssl, caplog):
    args = kafka_client_args(sasl_ssl.kafka)
    assert isinstance(args["sasl_plain_password"], Secret)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("rtrl.test").debug("client args %s / %r", args, args)
    assert PASSWORD not in caplog.text and "'***'" in caplog.text
    assert PASSWORD not in repr(args) and PASSWORD not in f"{args}"


def test_the_password_is_not_in_a_connection_error(sasl_ssl, monkeypatch):
    import kafka
    from kafka.errors import KafkaConnectionError

    from instrumentation.transport import KafkaTransport, TransportError

    def refuse(**kwargs):
        raise KafkaConnectionError("no broker answered")

    monkeypatch.setattr(kafka, "KafkaProducer", refuse)
    t = KafkaTransport(sasl_ssl.kafka)
    with pytest.raises(TransportError) as e:
        t._connect()
    assert PASSWORD not in str(e.value) and "b1:9093,b2:9093" in str(e.value)
    assert PASSWORD not in repr(t.__dict__)


# -- every construction site ------------------------------------------------------------------------------------

class Recorder:
    """Stands in for a kafka-python client class: records each construction's kwargs."""

    def __init__(self, calls: list, kind: str):
        self.calls, self.kind = calls, kind

    def __call__(self, *args, **kwargs):
        self.calls.append((self.kind, kwargs))
        return _FakeClient()


class _FakeClient:
    """Answers every call: a cluster id, no topics, no records, and itself (a future, a producer) otherwise."""

    def __getattr__(self, name):
        answers = {"describe_cluster": {"cluster_id": "c"}, "list_topics": [], "poll": {}, "end_offsets": {},
                   "partitions_for_topic": set()}
        return lambda *a, **k: answers.get(name, self)


@pytest.fixture
def recorded(monkeypatch):
    import kafka

    calls: list = []
    for kind in CLIENTS:
        monkeypatch.setattr(kafka, kind, Recorder(calls, kind))
    return calls


def _sites(cfg):
    """Each site's factory, called the way the project calls it."""
    from infra.bench import archive as bench_archive
    from infra.chaos import kafka_io
    from infra.stack.broker import ensure_topics
    from instrumentation.collector.health import KafkaProbe
    from instrumentation.transport import KafkaTransport, kafka_reachable
    from pipelines.archive.consumer import KafkaSource
    from pipelines.archive.deadletter import KafkaDeadLetterSink
    from pipelines.rewards import kafka_range

    return {
        "transport producer": lambda: KafkaTransport(cfg.kafka)._connect(),
        "kafka_reachable admin": lambda: kafka_reachable(cfg.kafka),
        "collector probe admin": lambda: KafkaProbe(cfg.kafka)(),
        "archive source consumer+admin": lambda: KafkaSource(cfg.kafka, ("trajectories",), "g"),
        "archive dead-letter producer": lambda: KafkaDeadLetterSink(cfg.kafka, "dead-letter"),
        "range consumer": lambda: kafka_range._consumer(cfg.kafka),
        "range cluster id admin": lambda: kafka_range.cluster_id(cfg.kafka),
        "range reader consumer": lambda: kafka_range.ReadKafkaRangeFn(cfg.kafka).setup(),
        "stack topics admin": lambda: ensure_topics(cfg.kafka, {"trajectories": 3}),
        "chaos consumer": lambda: kafka_io._consumer(cfg.kafka),
        "chaos producer": lambda: kafka_io.produce(cfg.kafka, []),
        "bench archive producer": lambda: bench_archive._produce(cfg.kafka, 1),
    }


SITE_NAMES = ["transport producer", "kafka_reachable admin", "collector probe admin", "archive source consumer+admin",
              "archive dead-letter producer", "range consumer", "range cluster id admin", "range reader consumer",
              "stack topics admin", "chaos consumer", "chaos producer", "bench archive producer"]


@pytest.mark.parametrize("site", SITE_NAMES)
def test_every_client_constructor_receives_the_sasl_settings(site, sasl_ssl, recorded):
    _sites(sasl_ssl)[site]()
    assert recorded, f"{site} made no Kafka client"
    for kind, kwargs in recorded:
        _assert_secured(kwargs, sasl_ssl)


def test_the_site_list_is_complete():
    assert set(_sites(None)) == set(SITE_NAMES)


def test_the_cadence_consumer_receives_the_sasl_settings(sasl_ssl, recorded, monkeypatch):
    from datetime import datetime, timezone

    from infra.orchestrator import cadence

    cadence.count_mature_requests(sasl_ssl, datetime.now(timezone.utc), timeout_s=0.1)
    assert [kind for kind, _ in recorded] == ["KafkaConsumer"]
    _assert_secured(recorded[0][1], sasl_ssl)


def test_topics_get_their_configured_replication_and_retention(tmp_path, recorded, monkeypatch):
    import kafka.admin

    made = []
    monkeypatch.setattr(kafka.admin, "NewTopic", lambda name, n, r, topic_configs=None:
                        made.append((name, n, r, topic_configs)) or type("T", (), {"name": name})())
    from infra.stack.broker import ensure_topics

    cfg = load_config(None, [f'state_dir="{tmp_path}"', "kafka.replication_factor=3",
                             "kafka.topic_replication.dead-letter=2", "kafka.topic_partitions.trajectories=6",
                             "kafka.retention_s=50400"])
    from schemas.topics import TOPICS

    ensure_topics(cfg.kafka, {t: cfg.kafka.partitions_for(t) for t in TOPICS},
                  replication={t: cfg.kafka.replication_for(t) for t in TOPICS}, configs=cfg.kafka.topic_configs())
    got = {name: (n, r) for name, n, r, _ in made}
    assert got["trajectories"] == (6, 3) and got["dead-letter"] == (3, 2) and got["telemetry.edits"] == (3, 3)
    assert {name: c for name, _, _, c in made} == {t: {"retention.ms": "50400000", "retention.bytes": "-1"}
                                                   for t in TOPICS}


def test_the_default_replication_is_1(tmp_path):
    cfg = load_config(None, [f'state_dir="{tmp_path}"'])
    assert cfg.kafka.replication_for("trajectories") == 1


# -- no new site can forget them --------------------------------------------------------------------------------

def _is_shared_args(node) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "id", None) == "kafka_client_args"


def client_calls_without_shared_args(files: list[Path], root: Path) -> list[str]:
    """Calls of KafkaProducer/KafkaConsumer/KafkaAdminClient that do not unpack `kafka_client_args(...)` (directly,
    or a name or attribute the same module binds to its result), or that pass bootstrap/security settings of their
    own."""
    bad = []
    for f in files:
        tree = ast.parse(f.read_text(encoding="utf-8"))
        bound = {t.id if isinstance(t, ast.Name) else t.attr for n in ast.walk(tree)
                 if isinstance(n, ast.Assign) and _is_shared_args(n.value)
                 for t in n.targets if isinstance(t, (ast.Name, ast.Attribute))}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name not in CLIENTS:
                continue
            shared = any(k.arg is None and (_is_shared_args(k.value) or getattr(k.value, "id", None) in bound
                                            or getattr(k.value, "attr", None) in bound) for k in node.keywords)
            own = [k.arg for k in node.keywords if k.arg == "bootstrap_servers" or (k.arg or "").startswith(
                ("security_", "sasl_", "ssl_"))]
            if not shared or own or node.args:
                bad.append(f"{f.relative_to(root).as_posix()}:{node.lineno} {name}(...)")
    return bad


def test_every_client_in_the_source_takes_the_shared_args():
    files = sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))
    assert client_calls_without_shared_args(files, REPO) == []


def test_the_scan_catches_a_new_site(tmp_path):
    f = tmp_path / "new.py"
    f.write_text("from kafka import KafkaProducer\np = KafkaProducer(bootstrap_servers=b, acks='all')\n"
                 "q = KafkaProducer(**kafka_client_args(k), acks='all')\n"
                 "a = kafka_client_args(k)\nr = KafkaConsumer(**a)\ns = KafkaAdminClient(**other)\n"
                 "t = KafkaConsumer(**a, ssl_cafile='x')\n")
    assert client_calls_without_shared_args([f], tmp_path) == ["new.py:2 KafkaProducer(...)",
                                                               "new.py:6 KafkaAdminClient(...)",
                                                               "new.py:7 KafkaConsumer(...)"]


def test_the_stream_jobs_consumer_config_comes_from_the_shared_function():
    src = (REPO / "pipelines/rewards/stream_job.py").read_text()
    assert "**kafka_consumer_config(" in src and '"bootstrap.servers"' not in src
