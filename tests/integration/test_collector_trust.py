"""The collector's listener as deployed (uvicorn, its HTTP parser, TLS): a TLS handshake with a self-signed
certificate made here, a request over it, the CLI's own health probe over HTTPS, and header limits enforced by the
HTTP parser. No broker is needed: what reaches Kafka is covered by test_collector_kafka.py; here the validated
records go to an in-memory transport."""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import subprocess
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from infra.argv import rtrl_argv
from instrumentation.collector.app import create_app
from instrumentation.collector.config import CollectorConfig
from schemas.api_keys import KeyStore
from instrumentation.collector.server import server_for, url_of
from instrumentation.collector_client import CollectorTransport
from instrumentation.transport import Record
from schemas import parse_event
from tests.conftest import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
REPO = Path(__file__).parents[2]
FIXTURES = REPO / "schemas" / "fixtures"


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A fresh self-signed certificate for 127.0.0.1 / localhost and its key (PEM files): with the `cryptography`
    package when installed, else the openssl command."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
        return cert, key
    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                               x509.DNSName("localhost")]), critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(private, hashes.SHA256()))
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    key.chmod(0o600)
    return cert, key


def event(kind: str = "edit_applied") -> dict:
    d = json.loads((FIXTURES / kind / "v1.json").read_text())
    d.update(event_id=str(uuid.uuid4()), event_time=datetime.now(timezone.utc).isoformat())
    return d


class Memory:
    """The Transport protocol, keeping what it is sent (Kafka is not what these tests are about)."""

    def __init__(self):
        self.records: list[Record] = []

    def send(self, records):
        self.records += list(records)

    def close(self):
        pass


@contextmanager
def running(cfg: CollectorConfig, keys: KeyStore):
    """The collector app under uvicorn with the collector's listener settings (TLS, header limits)."""
    transport = Memory()
    server = server_for(create_app(cfg, keys=keys, transport=transport, kafka_ok=lambda: True), cfg,
                        log_level="warning")
    thread = threading.Thread(target=server.run, name="collector", daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), 30, "the collector starting", interval_s=0.05)
    assert server.started, "collector did not start"
    try:
        yield url_of(cfg), transport
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture
def tls(tmp_path):
    cert, key = self_signed(tmp_path)
    cfg = CollectorConfig(port=free_port(), tls_cert_file=str(cert), tls_key_file=str(key))
    keys = KeyStore(tmp_path / "keys.json")
    api_key = keys.create("web", org="org-a")
    with running(cfg, keys) as (url, transport):
        yield url, api_key, cert, transport


def test_tls_handshake_and_a_request_succeed_with_a_self_signed_certificate_made_in_the_test(tls):
    url, api_key, cert, transport = tls
    assert url.startswith("https://127.0.0.1:")
    port = int(url.rsplit(":", 1)[1])
    ctx = ssl.create_default_context(cafile=str(cert))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        assert s.version() in ("TLSv1.2", "TLSv1.3")
        assert s.getpeercert()["subject"] == ((("commonName", "127.0.0.1"),),)
    sent = event()
    r = httpx.post(f"{url}/v1/events", json={"events": [sent]}, headers={"Authorization": f"Bearer {api_key}"},
                   verify=ctx, timeout=30)
    assert r.status_code == 200 and r.json() == {"accepted": 1, "rejected": []}
    assert [parse_event(json.loads(rec.value)).event_id for rec in transport.records] == [sent["event_id"]]


def test_the_sdk_transport_sends_over_tls_trusting_the_collectors_certificate(tls):
    url, api_key, cert, transport = tls
    client = CollectorTransport(url, api_key, verify=str(cert), timeout_s=30)
    e = event()
    client.send([Record("telemetry.edits", b"u", json.dumps(e).encode())])
    client.close()
    assert json.loads(transport.records[-1].value)["event_id"] == e["event_id"]


def test_a_client_that_does_not_trust_the_certificate_fails_the_handshake(tls):
    url, api_key, _, transport = tls
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.post(f"{url}/v1/events", json={"events": [event()]}, headers={"Authorization": f"Bearer {api_key}"},
                   timeout=30)
    assert transport.records == []


def test_plain_http_to_the_tls_port_is_not_served(tls):
    url, api_key, _, transport = tls
    with pytest.raises(httpx.TransportError):
        httpx.post(url.replace("https://", "http://") + "/v1/events", json={"events": [event()]},
                   headers={"Authorization": f"Bearer {api_key}"}, timeout=10)
    assert transport.records == []


def test_detached_collector_with_tls_answers_its_own_health_probe_then_stops(tmp_path):
    cert, key = self_signed(tmp_path)
    port = free_port()
    overrides = [f'state_dir="{tmp_path / "state"}"', f"collector.port={port}",
                 f'collector.tls_cert_file="{cert}"', f'collector.tls_key_file="{key}"',
                 f'kafka.bootstrap_servers="127.0.0.1:{free_port()}"', "collector.startup_timeout_s=60"]
    out = subprocess.run(rtrl_argv("collector", "--detach", overrides=overrides), capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"https://127.0.0.1:{port}" in out.stdout
        r = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=ssl.create_default_context(cafile=str(cert)),
                      timeout=30)
        assert r.status_code == 503 and r.json()["kafka"] is False  # no broker here: served, over TLS
    finally:
        subprocess.run(rtrl_argv("down", overrides=overrides), capture_output=True, text=True, cwd=REPO, timeout=120)


# -- header limits in the HTTP parser ------------------------------------------------------------------------------
def _raw_request(port: int, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        chunks = []
        while True:
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


@pytest.fixture
def plain(tmp_path):
    cfg = CollectorConfig(port=free_port(), max_headers=32, max_header_bytes=8192, header_timeout_s=1.0,
                          rate_limit_unauthenticated_per_s=1, rate_limit_unauthenticated_burst=3)
    keys = KeyStore(tmp_path / "keys.json")
    keys.create("web", org="org-a")
    with running(cfg, keys) as (url, transport):
        yield int(url.rsplit(":", 1)[1]), transport


def test_too_many_headers_are_refused_by_the_server_with_431(plain):
    port, _ = plain
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-Pad-%d: 1\r\n" % i for i in range(200)) + b"\r\n"
    reply = _raw_request(port, head)
    assert reply.startswith(b"HTTP/1.1 431"), reply[:200]


def test_headers_over_the_byte_limit_are_refused_by_the_server_with_431_before_they_all_arrive(plain):
    port, _ = plain
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000)  # headers never completed
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 431"), reply[:200]


def test_a_request_within_the_header_limits_is_served(plain):
    port, _ = plain
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + b"X-Pad: " + b"a" * 4000 + b"\r\n\r\n"
    assert _raw_request(port, head).startswith(b"HTTP/1.1 200")


def test_headers_sent_slowly_get_408_and_the_connection_is_closed(plain):
    port, _ = plain
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        t0 = time.monotonic()
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")          # then nothing more: a slow sender
        reply = s.recv(65536)
        waited = time.monotonic() - t0
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        assert s.recv(65536) == b""                                       # closed
    assert waited < 5


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(plain):
    port, _ = plain
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        assert s.recv(65536).startswith(b"HTTP/1.1 408")


def test_a_refused_key_closes_the_connection_without_reading_the_body(plain):
    port, _ = plain
    declared = 200 * 2**20
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer rtrl_" + b"x" * 43
                  + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(declared).encode() + b"\r\n\r\n")
        chunk = b"a" * 65536
        try:
            while sent < declared:
                s.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass
    assert sent < 32 * 2**20, f"the server read {sent} bytes of a refused request's body"


def test_forwarded_for_from_an_untrusted_peer_does_not_change_the_address_the_limits_key_on(plain):
    port, _ = plain
    url = f"http://127.0.0.1:{port}/v1/events"
    bad = {"Authorization": "Bearer rtrl_" + "x" * 43, "Content-Type": "application/json"}
    codes = [httpx.post(url, content=b'{"events": []}', timeout=10,
                        headers={**bad, "X-Forwarded-For": f"203.0.113.{i}"}).status_code for i in range(6)]
    assert codes[:3] == [401] * 3 and 429 in codes[3:], codes    # every attempt counted against 127.0.0.1
