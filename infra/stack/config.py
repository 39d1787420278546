"""Configuration of the embedded local stack (`[kafka]` and `[mlflow]` in rtrl.toml)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# The same names as schemas.kafka_clients (SECURITY_PROTOCOLS, SASL_MECHANISMS, EXTRA_CLIENT_KEYS; a unit test
# keeps them equal), written out so that loading config imports nothing of `schemas` (its package pulls pyarrow).
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
EXTRA_CLIENT_KEYS = frozenset({
    "api_version", "bootstrap_timeout_ms", "client_dns_lookup", "connections_max_idle_ms",
    "max_in_flight_requests_per_connection", "metadata_max_age_ms", "metrics_num_samples", "metrics_sample_window_ms",
    "proxy_url", "receive_buffer_bytes", "receive_message_max_bytes", "reconnect_backoff_max_ms",
    "reconnect_backoff_ms", "request_timeout_ms", "retry_backoff_ms", "sasl_kerberos_domain_name",
    "sasl_kerberos_name", "sasl_kerberos_service_name", "send_buffer_bytes", "socks5_proxy", "ssl_check_hostname",
    "ssl_crlfile"})


class KafkaConfig(BaseModel):
    """`[kafka]`: the cluster, its client security settings (every producer, consumer and admin client, and Beam's
    KafkaIO, take them through `schemas.kafka_clients`), the embedded broker, and the topics' layout. The SASL
    password is never a literal here: it is read from a file or an environment variable when a client is made."""

    model_config = ConfigDict(extra="forbid")

    bootstrap_servers: str = Field(default="", description="An existing Kafka cluster ('host:port,...'). When set, "
                                   "`rtrl up` starts no broker and only creates the topics there; '' = the embedded "
                                   "Tansu broker on host:port.")
    security_protocol: SecurityProtocol = Field(
        default="PLAINTEXT", description="PLAINTEXT, SSL (TLS; with ssl_certfile and ssl_keyfile: mutual TLS), "
        "SASL_PLAINTEXT or SASL_SSL.")
    sasl_mechanism: SaslMechanism | None = Field(default=None, description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; "
                                                 "required with SASL_*.")
    sasl_username: str = Field(default="", description="SASL user; required with SASL_*.")
    sasl_password_file: str = Field(default="", description="File holding the SASL password (trailing newline "
                                    "ignored). With SASL_*, exactly one of this and sasl_password_env.")
    sasl_password_env: str = Field(default="", description="Name of the environment variable holding the SASL "
                                   "password.")
    ssl_cafile: str = Field(default="", description="PEM file of the CA(s) that signed the brokers' certificates "
                            "('' = the system's trust store). SSL and SASL_SSL only.")
    ssl_certfile: str = Field(default="", description="PEM client certificate (chain), for mutual TLS.")
    ssl_keyfile: str = Field(default="", description="PEM private key of ssl_certfile, unencrypted (PKCS#8 for "
                             "Beam's Java KafkaIO).")
    extra: dict[str, Any] = Field(default_factory=dict, description="Further kafka-python settings for every "
                                  "producer, consumer and admin client, e.g. {ssl_check_hostname = false}; only "
                                  "settings all three accept.")
    extra_properties: dict[str, str] = Field(default_factory=dict, description="Further Java client properties for "
                                             "Beam's KafkaIO (the streaming reward job).")
    tls_terminator_dir: str = Field(
        default="", description="Embedded broker only: serve it over mutual TLS. `rtrl up` starts stunnel on "
        "host:port with this folder's server.pem and server.key, requiring client certificates signed by its ca.pem, "
        "in front of the broker, which then listens in plaintext on a free loopback port and advertises host:port. "
        "Clients set security_protocol = \"SSL\" and ssl_* (`python -m infra.stack.tls_proxy DIR` makes a local CA, "
        "server and client certificate there and prints these settings).")
    host: str = Field(default="127.0.0.1", description="Embedded broker bind address.")
    port: int = Field(default=19092, ge=1, le=65535, description="Embedded broker port.")
    storage_engine: Literal["memory", "s3"] = Field(
        default="memory", description="Where the embedded broker keeps its log: \"memory\" = inside the broker "
        "(fastest; lost when the broker stops; nothing deletes by retention, so it grows with the traffic until "
        "then); \"s3\" = a local S3-compatible object store process, so the log survives broker crashes and "
        "restarts, and `broker-watch` deletes what is past the topics' retention (retention_interval_s); several "
        "times lower throughput (docs/benchmarks.md).")
    partitions: int = Field(default=3, ge=1, le=1024, description="Partitions per topic unless overridden.")
    topic_partitions: dict[str, int] = Field(default_factory=dict, description="Per-topic partition overrides, e.g. "
                                                 "{\"telemetry.snapshots\" = 6}.")
    replication_factor: int = Field(default=1, ge=1, le=16, description="Replicas per topic that `rtrl up` creates "
                                    "unless overridden (1 for the embedded broker; 3 is usual on a cluster).")
    topic_replication: dict[str, Annotated[int, Field(ge=1, le=16)]] = Field(
        default_factory=dict, description="Per-topic replication overrides.")
    retention_s: int = Field(
        default=24 * 3600, ge=0, le=365 * 86400, description="How long every topic keeps a record (its "
        "retention.ms): set when `rtrl up` creates a topic, and on a topic that exists with another value. 24 h = "
        "two cycles at the production cadence (orchestrator.interval_s, 5 h: a record waits up to one interval for "
        "the collect step that fixes its range, up to another when that cycle runs late) plus 14 h for an outage of "
        "the orchestrator or the archiver to be noticed and mended. 0 = no time bound (retention.ms = -1). The "
        "embedded broker (Tansu 0.6) records the setting but deletes nothing by it; over storage \"s3\" "
        "`broker-watch` does (retention_interval_s), over \"memory\" nothing does (see memory_warn_bytes).")
    retention_bytes: int = Field(
        default=0, ge=0, le=2**62, description="Most bytes a partition keeps (its retention.bytes; a cluster, "
        "or `broker-watch` over the embedded broker's storage \"s3\", deletes the oldest segments past it); 0 = no size bound (-1). Off by default: a size bound can drop "
        "records a late cycle has not read yet; the time bound (retention_s) is the rule.")
    retention_interval_s: float = Field(
        default=60.0, ge=0, le=86400, description="Embedded broker over storage \"s3\" only: how often "
        "`broker-watch` (started by `rtrl up`, its log in <state_dir>/logs) deletes from the object store the record "
        "batches past their topic's retention.ms or retention.bytes, keeping each partition's newest batch and "
        "whatever a consumer group that committed within retention.ms has not committed past "
        "(infra/stack/log_retention.py). 0 = never (the log then grows with the traffic).")
    memory_warn_bytes: int = Field(
        default=2 * 2**30, ge=0, le=2**50, description="Embedded broker only: `broker-watch` logs a warning each "
        "time the resident memory of the process holding the Kafka log (the broker over storage \"memory\", the "
        "object store over \"s3\") passes this many bytes: both keep the log in memory, over \"memory\" all of "
        "it (the broker deletes no record by retention). 0 = no warning (and no watcher over \"memory\").")
    startup_timeout_s: float = Field(default=30.0, gt=0, le=600, description="Health-check deadline at start.")

    def bootstrap(self) -> str:
        return self.bootstrap_servers or f"{self.host}:{self.port}"

    @field_validator("sasl_password_file", "ssl_cafile", "ssl_certfile", "ssl_keyfile")
    @classmethod
    def _file_exists(cls, v: str, info) -> str:
        if v and not Path(v).expanduser().is_file():
            raise ValueError(f"{v!r} is not a readable file")
        return v

    @field_validator("extra")
    @classmethod
    def _known_extra(cls, v: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(k for k in v if k not in EXTRA_CLIENT_KEYS)
        if unknown:
            raise ValueError(f"{unknown} cannot go in extra: security settings and bootstrap_servers have their own "
                             "keys, client_id is set per client, and extra takes only settings every kafka-python "
                             f"client accepts ({', '.join(sorted(EXTRA_CLIENT_KEYS))})")
        return v

    @model_validator(mode="after")
    def _coherent_security(self):
        p = self.security_protocol
        if p.startswith("SASL_"):
            missing = [k for k in ("sasl_mechanism", "sasl_username") if not getattr(self, k)]
            if missing:
                raise ValueError(f"security_protocol {p} needs {' and '.join(missing)}")
            if bool(self.sasl_password_file) == bool(self.sasl_password_env):
                raise ValueError(f"security_protocol {p} needs the password from exactly one of sasl_password_file "
                                 "and sasl_password_env (never a literal in config)")
        elif self.sasl_mechanism or self.sasl_username or self.sasl_password_file or self.sasl_password_env:
            raise ValueError(f"sasl_* settings are set but security_protocol is {p} (SASL_SSL or SASL_PLAINTEXT "
                             "use them)")
        if p not in ("SSL", "SASL_SSL") and (self.ssl_cafile or self.ssl_certfile or self.ssl_keyfile):
            raise ValueError(f"ssl_* files are set but security_protocol is {p} (SSL or SASL_SSL use them)")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise ValueError("mutual TLS needs both ssl_certfile and ssl_keyfile")
        if self.tls_terminator_dir:
            if self.bootstrap_servers:
                raise ValueError("tls_terminator_dir fronts the embedded broker; with bootstrap_servers set there is "
                                 "none (the cluster serves its own TLS)")
            if p != "SSL":
                raise ValueError(f"tls_terminator_dir serves the embedded broker over TLS with client certificates, "
                                 f"but security_protocol is {p}: set it to SSL, with ssl_cafile, ssl_certfile and "
                                 "ssl_keyfile")
            missing = [f for f in ("ca.pem", "server.pem", "server.key")
                       if not (Path(self.tls_terminator_dir).expanduser() / f).is_file()]
            if missing:
                raise ValueError(f"tls_terminator_dir {self.tls_terminator_dir!r} lacks {', '.join(missing)} "
                                 "(`python -m infra.stack.tls_proxy DIR` makes them)")
        return self

    def partitions_for(self, topic: str) -> int:
        return self.topic_partitions.get(topic, self.partitions)

    def replication_for(self, topic: str) -> int:
        return self.topic_replication.get(topic, self.replication_factor)

    def topic_configs(self) -> dict[str, str]:
        """The retention settings every topic is created with, as Kafka topic configs (-1: no bound)."""
        return {"retention.ms": str(self.retention_s * 1000 if self.retention_s else -1),
                "retention.bytes": str(self.retention_bytes or -1)}


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class MlflowServerConfig(BaseModel):
    """`[mlflow.server]`: `rtrl mlflow-server`, the tracking and registry server of the services topology and the
    cluster (docs/gate.md): a Postgres backend store and an object-store artifact store, proxied (`--serve-artifacts`:
    clients up- and download through the server and hold no object-store credentials)."""

    model_config = ConfigDict(extra="forbid")

    backend_store_uri: str = Field(default="", description="The server's tracking and registry store, e.g. "
                                   "postgresql://user@host:5432/mlflow (password from PGPASSWORD or ~/.pgpass, never "
                                   "here). '' = the embedded SQLite file (mlflow.tracking_uri's default).")
    artifacts_destination: str = Field(default="", description="Where the server keeps version files, e.g. "
                                       "s3://bucket/mlflow (S3 settings from the server's AWS_* environment). '' = "
                                       "mlflow.artifact_root or <state_dir>/mlflow-artifacts.")
    host: str = Field(default="127.0.0.1", description="Bind address; beyond loopback only with app_name = "
                      "\"basic-auth\" (no server binds beyond loopback without auth).")
    port: int = Field(default=15001, ge=1, le=65535, description="The server's port; clients set mlflow.tracking_uri "
                      "= \"http://HOST:PORT\".")
    workers: int = Field(default=2, ge=1, le=64, description="Server worker processes.")
    app_name: Literal["", "basic-auth"] = Field(default="", description="\"basic-auth\": MLflow's basic "
                                                "authentication (users in its own auth database; clients set "
                                                "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD).")

    @model_validator(mode="after")
    def _auth_beyond_loopback(self):
        if self.host not in LOOPBACK_HOSTS and not self.app_name:
            raise ValueError(f"mlflow.server.host {self.host!r} is beyond loopback: set mlflow.server.app_name = "
                             "\"basic-auth\" (no server binds beyond loopback without auth)")
        return self


class MlflowConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tracking_uri: str = Field(default="", description="'' means SQLite at <state_dir>/mlflow.db; "
                              "\"http://HOST:PORT\" an MLflow server (`rtrl mlflow-server`).")
    artifact_root: str = Field(default="", description="Where version files go: a local folder or an object-store "
                               "URL (s3://bucket/prefix; S3 settings from the AWS_* environment, as for the "
                               "archive). '' means <state_dir>/mlflow-artifacts, or, with a server as tracking_uri, "
                               "the server's own (proxied) artifact store.")
    promotion_lock: str = Field(default="", description="What serialises promotions (the compare-and-swap of alias "
                                "champion): a local path (an flock: promoters on one host), an object-store URL "
                                "(a lease object: promoters on any host) or a Postgres URL (an advisory lock: "
                                "promoters on any host; password from PGPASSWORD or ~/.pgpass). '' means a lease "
                                "under an s3:// artifact_root, else an flock next to the SQLite store; with a "
                                "server as tracking_uri, set it.")
    ui_host: str = Field(default="127.0.0.1", description="MLflow UI bind address; localhost by default.")
    ui_port: int = Field(default=15000, ge=1, le=65535, description="MLflow UI port (`rtrl up --mlflow-ui`).")
    startup_timeout_s: float = Field(default=60.0, gt=0, le=600, description="How long start-up waits "
                                     "for the MLflow UI (`rtrl up --mlflow-ui`) or server (`rtrl mlflow-server`, at "
                                     "least 120 s) to pass its health check.")
    registered_model: str = Field(default="rtrl-policy", min_length=1, max_length=128,
                                  description="Registered model whose versions are the policy checkpoints.")
    server: MlflowServerConfig = Field(default_factory=MlflowServerConfig)

    def remote(self) -> bool:
        """Whether the tracking URI names a server (http, https): the server then decides where artifacts go."""
        return self.tracking_uri.split(":", 1)[0] in ("http", "https")
