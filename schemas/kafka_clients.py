"""How every Kafka client of rtrl connects: one settings type and the two functions that turn it into client
arguments. Producers: SDK transport, collector, dead-letter sink, chaos and bench tools. Consumers: archiver, reward
cycle (offset ranges), cadence, chaos. Admin clients: the stack's topic creation, health probes, cluster ids. Beam's
KafkaIO (the streaming reward job) takes the Java-style form.

    KafkaProducer(**kafka_client_args(kafka), acks="all", client_id="rtrl-collector")
    ReadFromKafka(consumer_config={**kafka_consumer_config(kafka), "group.id": ...}, ...)

`kafka` is either a plain bootstrap string ("host:port,..."; PLAINTEXT, as tests and the embedded broker use) or a
`KafkaClientSettings` (the `[kafka]` config section, which validates them, is one). No client may be built from
`bootstrap_servers` alone: tests/unit/schemas/test_kafka_clients.py scans the source tree for one.

The SASL password is never a literal in config: it is read, when a client is made, from `sasl_password_file` or the
environment variable named by `sasl_password_env`. It travels as a `Secret` (a str whose repr is masked), so a
logged argument dict does not show it; no error message here contains it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol, Union

_JAAS_MODULE = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


class Secret(str):
    """A str that does not show itself in repr (so not in a logged dict or a traceback's locals either)."""

    def __repr__(self) -> str:
        return "'***'"


class KafkaClientSettings(Protocol):
    """What the functions below read of a settings object: the `[kafka]` section (infra.stack.config.KafkaConfig,
    which validates them) is one. Duck-typed, so that loading config imports nothing of `schemas`."""

    security_protocol: str
    sasl_mechanism: str | None
    sasl_username: str
    sasl_password_file: str
    sasl_password_env: str
    ssl_cafile: str
    ssl_certfile: str
    ssl_keyfile: str
    extra: dict[str, Any]
    extra_properties: dict[str, str]

    def bootstrap(self) -> str: ...


KafkaTarget = Union[str, KafkaClientSettings]
"""What a function that makes Kafka clients takes: a plain bootstrap string (PLAINTEXT) or the settings."""

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

EXTRA_CLIENT_KEYS = frozenset({
    "api_version", "bootstrap_timeout_ms", "client_dns_lookup", "connections_max_idle_ms",
    "max_in_flight_requests_per_connection", "metadata_max_age_ms", "metrics_num_samples", "metrics_sample_window_ms",
    "proxy_url", "receive_buffer_bytes", "receive_message_max_bytes", "reconnect_backoff_max_ms",
    "reconnect_backoff_ms", "request_timeout_ms", "retry_backoff_ms", "sasl_kerberos_domain_name",
    "sasl_kerberos_name", "sasl_kerberos_service_name", "send_buffer_bytes", "socks5_proxy", "ssl_check_hostname",
    "ssl_crlfile"})
"""Settings `extra` may carry: those every kafka-python client (producer, consumer, admin) accepts, less the ones
with their own key or set per client (a unit test checks this against kafka-python)."""


def sasl_password(kafka: KafkaClientSettings) -> Secret | None:
    """The SASL password, read now (None without SASL). Errors name the source, never the value."""
    if not kafka.security_protocol.startswith("SASL_"):
        return None
    if kafka.sasl_password_env:
        value = os.environ.get(kafka.sasl_password_env)
        if not value:
            raise ValueError(f"kafka.sasl_password_env: environment variable {kafka.sasl_password_env} is not set "
                             "or is empty")
        return Secret(value)
    if not kafka.sasl_password_file:
        raise ValueError("kafka: SASL needs sasl_password_file or sasl_password_env")
    try:
        value = Path(kafka.sasl_password_file).expanduser().read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"kafka.sasl_password_file: cannot read {kafka.sasl_password_file}: "
                         f"{getattr(e, 'strerror', None) or type(e).__name__}") from None
    if not value:
        raise ValueError(f"kafka.sasl_password_file: {kafka.sasl_password_file} is empty")
    return Secret(value)


def bootstrap_of(kafka: KafkaTarget) -> str:
    """The bootstrap servers, for messages (never the credentials)."""
    return kafka if isinstance(kafka, str) else kafka.bootstrap()


def kafka_client_args(kafka: KafkaTarget) -> dict[str, Any]:
    """kafka-python keyword arguments shared by every KafkaProducer, KafkaConsumer and KafkaAdminClient: bootstrap,
    security and `extra`. Each site adds its own (client_id, acks, group_id, ...) beside them."""
    if isinstance(kafka, str):
        return {"bootstrap_servers": kafka}
    args: dict[str, Any] = {"bootstrap_servers": kafka.bootstrap(), **kafka.extra,
                            "security_protocol": kafka.security_protocol}
    if kafka.security_protocol.startswith("SASL_"):
        args.update(sasl_mechanism=kafka.sasl_mechanism, sasl_plain_username=kafka.sasl_username,
                    sasl_plain_password=sasl_password(kafka))
    for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        if getattr(kafka, key):
            args[key] = str(Path(getattr(kafka, key)).expanduser())
    return args


def _jaas_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pem(path: str, what: str) -> str:
    try:
        return Path(path).expanduser().read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"kafka.{what}: cannot read {path} as PEM: {type(e).__name__}") from None


def kafka_consumer_config(kafka: KafkaTarget) -> dict[str, str]:
    """Java client properties (Beam's KafkaIO `consumer_config`): bootstrap.servers, security.protocol,
    sasl.mechanism, sasl.jaas.config, and PEM trust/key material, plus `extra_properties`.

    The PEM contents go inline (`ssl.truststore.certificates`, `ssl.keystore.certificate.chain`, `ssl.keystore.key`,
    both stores of type PEM; Kafka clients >= 2.7), so the runner's workers need no copy of the files. Java reads
    only PKCS#8 keys ('BEGIN PRIVATE KEY'); convert others with `openssl pkcs8 -topk8 -nocrypt`."""
    if isinstance(kafka, str):
        return {"bootstrap.servers": kafka}
    conf: dict[str, str] = {"bootstrap.servers": kafka.bootstrap(), **kafka.extra_properties,
                            "security.protocol": kafka.security_protocol}
    if kafka.security_protocol.startswith("SASL_"):
        conf["sasl.mechanism"] = str(kafka.sasl_mechanism)
        conf["sasl.jaas.config"] = Secret(
            f"{_JAAS_MODULE[str(kafka.sasl_mechanism)]} required username={_jaas_quote(kafka.sasl_username)} "
            f"password={_jaas_quote(sasl_password(kafka))};")
    if kafka.ssl_cafile:
        conf["ssl.truststore.type"] = "PEM"
        conf["ssl.truststore.certificates"] = _pem(kafka.ssl_cafile, "ssl_cafile")
    if kafka.ssl_certfile:
        key = _pem(kafka.ssl_keyfile, "ssl_keyfile")
        if "-----BEGIN PRIVATE KEY-----" not in key:
            raise ValueError(f"kafka.ssl_keyfile: {kafka.ssl_keyfile} is not an unencrypted PKCS#8 key ('BEGIN "
                             "PRIVATE KEY'), which Java's KafkaIO needs: `openssl pkcs8 -topk8 -nocrypt -in KEY`")
        conf["ssl.keystore.type"] = "PEM"
        conf["ssl.keystore.certificate.chain"] = _pem(kafka.ssl_certfile, "ssl_certfile")
        conf["ssl.keystore.key"] = Secret(key)
    return conf


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out


_NO_CLIENT_CERT = ("CERTIFICATE_REQUIRED", "PEER_DID_NOT_RETURN_A_CERTIFICATE", "HANDSHAKE_FAILURE")
_CLIENT_CERT_REFUSED = ("UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_UNKNOWN", "UNSUPPORTED_CERTIFICATE",
                        "CERTIFICATE_EXPIRED", "CERTIFICATE_REVOKED", "DECRYPT_ERROR", "ACCESS_DENIED")
_NOT_TLS = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "UNKNOWN_PROTOCOL", "HTTP_REQUEST", "PACKET_LENGTH_TOO_LONG")


def _tls_failure(kafka: KafkaClientSettings, e: Exception) -> str:
    import ssl

    reason = str(getattr(e, "reason", "") or "")
    if isinstance(e, ssl.SSLCertVerificationError):
        hint = (" (or set extra.ssl_check_hostname = false)" if "mismatch" in str(e.verify_message) else "")
        return (f"the broker's certificate is not trusted: {e.verify_message}; kafka.ssl_cafile = "
                f"{kafka.ssl_cafile or '(the system trust store)'} must hold the CA that signed it{hint}")
    if any(r in reason for r in _NO_CLIENT_CERT) and not kafka.ssl_certfile:
        return ("the broker requires a client certificate (mutual TLS) and none is configured: set "
                f"kafka.ssl_certfile and kafka.ssl_keyfile ({reason})")
    if any(r in reason for r in _CLIENT_CERT_REFUSED + _NO_CLIENT_CERT):
        return (f"the broker refused the client certificate kafka.ssl_certfile = {kafka.ssl_certfile} ({reason}): it "
                "is not signed by a CA the broker trusts, or it expired or was revoked")
    if any(r in reason for r in _NOT_TLS):
        return f"no TLS there: does that address serve TLS (security_protocol {kafka.security_protocol})? ({reason})"
    return f"the TLS handshake failed: {type(e).__name__}: {e}"


def tls_refusal(kafka: KafkaTarget, timeout_s: float = 3.0) -> str | None:
    """Why a TLS connection to the bootstrap servers fails, naming the address and the setting to look at; None when
    the settings use no TLS, when the handshake goes through, or when nothing answers (not a TLS problem).

    kafka-python reports a refused handshake as it does an unreachable broker ("Unable to bootstrap"), so callers
    that found the cluster unreachable ask this for the reason. It connects with the same trust, certificate and
    host-name check as kafka-python, and reads once after the handshake: under TLS 1.3 a server refuses a client
    certificate (or its absence) only after the client's side of the handshake is done."""
    import socket
    import ssl

    if isinstance(kafka, str) or not kafka.security_protocol.endswith("SSL"):
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = bool(kafka.extra.get("ssl_check_hostname", True))
    try:
        if kafka.ssl_cafile:
            ctx.load_verify_locations(str(Path(kafka.ssl_cafile).expanduser()))
        else:
            ctx.load_default_certs()
        if kafka.ssl_certfile:
            ctx.load_cert_chain(str(Path(kafka.ssl_certfile).expanduser()), str(Path(kafka.ssl_keyfile).expanduser()))
    except (OSError, ssl.SSLError) as e:
        return f"Kafka TLS settings: cannot load kafka.ssl_cafile/ssl_certfile/ssl_keyfile: {e}"
    for host, port in _addresses(kafka.bootstrap()):
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError:
            continue
        try:
            with ctx.wrap_socket(sock, server_hostname=host) as tls:
                tls.settimeout(min(timeout_s, 1.0))
                try:
                    if tls.recv(1) == b"":
                        return (f"Kafka at {host}:{port} closed the connection right after the TLS handshake (a "
                                "refused client certificate?)")
                except (TimeoutError, socket.timeout):
                    continue                    # handshake done, the broker waits for a request: TLS is fine here
        except ssl.SSLError as e:
            return f"Kafka at {host}:{port} refused the TLS connection: {_tls_failure(kafka, e)}"
        except OSError as e:
            return (f"Kafka at {host}:{port} dropped the TLS handshake ({type(e).__name__}: {e}): does it serve TLS, "
                    "and accept this client's certificate?")
        finally:
            sock.close()
    return None


def explain_unreachable(kafka: KafkaTarget, error: BaseException | None = None, timeout_s: float = 3.0) -> str:
    """A message for a cluster that did not answer: the TLS reason when there is one (`tls_refusal`), else the
    bootstrap address, the protocol and the client's own error."""
    reason = tls_refusal(kafka, timeout_s)
    if reason:
        return reason
    protocol = "PLAINTEXT" if isinstance(kafka, str) else kafka.security_protocol
    detail = "" if error is None else str(error) if str(error).startswith(type(error).__name__) else \
        f"{type(error).__name__}: {error}"
    return f"Kafka at {bootstrap_of(kafka)} did not answer ({protocol})" + (f": {detail}" if detail else "")
