"""Mutual TLS in front of the embedded broker: stunnel (Debian's `stunnel4`) terminates TLS on `kafka.port`, requires
a client certificate signed by the configured CA, and forwards the plain Kafka protocol to Tansu on a loopback port
that only it uses. Tansu advertises the terminator's address, so every client (bootstrap and partition leaders)
reconnects through it. Tansu's own TLS listener (`--cert`) never completed a handshake in a probe (Tansu 0.6.0), hence
a terminator.

The files the terminator reads live in one folder (`kafka.tls_terminator_dir`): `ca.pem` (the CA whose client
certificates it accepts), `server.pem` and `server.key` (its own certificate, for 127.0.0.1 and localhost when made
here). `make_test_pki` (or `python -m infra.stack.tls_proxy DIR`) makes a local CA, that server certificate and one
client certificate (`client.pem`, `client.key`) with the `openssl` command: for tests and a local TLS stack, never a
production CA.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from infra.stack.process import ManagedProcess, StackError, port_accepts, port_is_free

NAME = "kafka-tls"
TERMINATOR_FILES = ("ca.pem", "server.pem", "server.key")


@dataclass(frozen=True)
class Pki:
    """A folder of PEM files: a CA, a server certificate signed by it, a client certificate signed by it. Keys are
    unencrypted PKCS#8 ('BEGIN PRIVATE KEY'), as Beam's Java KafkaIO needs."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.folder / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.folder / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.folder / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.folder / "client.key"

    def client_overrides(self) -> list[str]:
        """The `[kafka]` settings (as `--set` overrides) of a client that presents this folder's certificate."""
        return ['kafka.security_protocol="SSL"', f'kafka.ssl_cafile="{self.ca}"',
                f'kafka.ssl_certfile="{self.client_cert}"', f'kafka.ssl_keyfile="{self.client_key}"']


def _openssl(*args: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise StackError("the openssl command is missing (Debian package openssl; infra/setup.sh installs it)")
    out = subprocess.run([exe, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise StackError(f"openssl {args[0]} failed: {out.stderr.strip()[-500:]}")


def _signed(pki_folder: Path, name: str, subject: str, extensions: str, days: int) -> None:
    """`name`.key (a new P-256 key) and `name`.pem, signed by the folder's CA."""
    key, csr, ext = pki_folder / f"{name}.key", pki_folder / f"{name}.csr", pki_folder / f"{name}.ext"
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    ext.write_text(extensions + "\nauthorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki_folder / "ca.pem"), "-CAkey",
             str(pki_folder / "ca.key"), "-set_serial", f"0x{secrets.token_hex(12)}", "-days", str(days),
             "-extfile", str(ext), "-out", str(pki_folder / f"{name}.pem"))
    csr.unlink()
    ext.unlink()


def make_test_pki(folder: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), days: int = 30,
                  name: str = "rtrl-test") -> Pki:
    """A fresh local CA (`ca.pem`, `ca.key`), a server certificate for `hosts` (`server.pem`, `server.key`) and a
    client certificate (`client.pem`, `client.key`, CN `<name>-client`), all signed by that CA."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(folder / "ca.key"))
    _openssl("req", "-x509", "-new", "-key", str(folder / "ca.key"), "-subj", f"/CN={name} CA", "-days", str(days),
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-out", str(folder / "ca.pem"))
    san = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts)
    _signed(folder, "server", f"/CN={hosts[0]}", f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            f"extendedKeyUsage=serverAuth\nsubjectAltName={san}", days)
    _signed(folder, "client", f"/CN={name}-client", "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=clientAuth", days)
    for key in folder.glob("*.key"):
        key.chmod(0o600)
    return Pki(folder)


def stunnel_binary() -> str:
    for name in ("stunnel4", "stunnel"):
        if exe := shutil.which(name):
            return exe
    raise StackError("kafka.tls_terminator_dir is set but stunnel is missing (Debian package stunnel4; "
                     "infra/setup.sh installs it)")


def missing_terminator_files(folder: str | Path) -> list[str]:
    return [f for f in TERMINATOR_FILES if not (Path(folder).expanduser() / f).is_file()]


class TlsTerminator:
    """stunnel on (host, port), requiring client certificates signed by `<folder>/ca.pem`, forwarding to
    127.0.0.1:backend_port. A managed process of the state dir (`<state_dir>/run/kafka-tls.json`)."""

    def __init__(self, folder: str | Path, host: str, port: int, state_dir: Path):
        self.folder = Path(folder).expanduser().resolve()
        self.host, self.port = host, port
        self.proc = ManagedProcess(NAME, state_dir)

    @property
    def config_file(self) -> Path:
        return self.proc.state_dir / "run" / f"{NAME}.conf"

    def config_text(self, backend_port: int) -> str:
        return "\n".join([
            "foreground = yes", "pid =", "syslog = no", "debug = notice", "",
            "[kafka]", f"accept = {self.host}:{self.port}", f"connect = 127.0.0.1:{backend_port}",
            f"cert = {self.folder / 'server.pem'}", f"key = {self.folder / 'server.key'}",
            f"CAfile = {self.folder / 'ca.pem'}",
            "requireCert = yes", "verifyChain = yes",     # mutual TLS: no certificate, or another CA's, is refused
            "sslVersionMin = TLSv1.2", ""])

    def backend_port(self) -> int | None:
        rec = self.proc.info()
        return rec and rec.get("backend_port")

    def start(self, backend_port: int, timeout_s: float) -> dict:
        """Start (or find running, towards the same backend) the terminator and wait until it accepts connections."""
        if (rec := self.proc.info()) is not None:
            if rec.get("backend_port") == backend_port:
                return rec
            self.proc.stop()
        if missing := missing_terminator_files(self.folder):
            raise StackError(f"kafka.tls_terminator_dir {self.folder} lacks {', '.join(missing)} "
                             "(`python -m infra.stack.tls_proxy DIR` makes a local CA and certificates)")
        if not port_is_free(self.host, self.port):
            raise StackError(f"port {self.port} on {self.host} (the Kafka TLS terminator, kafka.port) is taken by "
                             "another process; stop it or choose another with --set kafka.port=PORT")
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(self.config_text(backend_port))
        rec = self.proc.start([stunnel_binary(), str(self.config_file)], extra={"backend_port": backend_port})
        self.proc.wait_healthy(lambda: port_accepts(self.host, self.port), timeout_s,
                               f"TLS listener on {self.host}:{self.port}")
        return rec

    def stop(self) -> bool:
        return self.proc.stop()


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m infra.stack.tls_proxy",
                                description="make a local test CA, a server certificate for 127.0.0.1/localhost "
                                "and a client certificate in DIR (for kafka.tls_terminator_dir); prints the client "
                                "settings")
    p.add_argument("dir", type=Path)
    p.add_argument("--host", action="append", help="a name or address of the server certificate (repeatable; "
                   "default 127.0.0.1 and localhost)")
    args = p.parse_args(argv)
    pki = make_test_pki(args.dir, tuple(args.host or ("127.0.0.1", "localhost")))
    print("\n".join(["[kafka]", f'tls_terminator_dir = "{pki.folder.resolve()}"', 'security_protocol = "SSL"',
                     f'ssl_cafile = "{pki.ca.resolve()}"', f'ssl_certfile = "{pki.client_cert.resolve()}"',
                     f'ssl_keyfile = "{pki.client_key.resolve()}"']))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
