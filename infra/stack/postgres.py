"""A Postgres server from the system packages, on loopback: the storage of the services topology on one machine
(Dagster's run/event/schedule storage, the MLflow server's backend store, the promotion lock), for tests and
`rtrl bench services`. A team's cluster points the same settings at its own managed Postgres instead
(docs/deployment.md).

    pg = LocalPostgres(state_dir, port=15432)
    pg.start()                           # initdb on first use, then `postgres` under the stack's process supervision
    url = pg.create_database("dagster")  # postgresql://rtrl@127.0.0.1:15432/dagster
    pg.stop()                            # fast shutdown (pg_ctl stop -m fast)

It listens on 127.0.0.1 only and trusts local connections (no password): nothing beyond this machine can reach
it, and it refuses any other host. Postgres will not run as root: as root the server runs as the `postgres` user
that the Debian package makes, and its data folder is `<state_dir>/postgres` when that user can reach it, else
`/var/lib/postgresql/rtrl/<hash of the state dir>` (the package's own folder; a test's temporary folder is private
to root).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

from infra.stack.process import ManagedProcess, StackError, port_accepts, port_is_free

LOOPBACK = ("127.0.0.1", "localhost", "::1")
USER = "rtrl"          # the database superuser initdb makes


def sqlalchemy_url(url: str) -> str:
    """A Postgres URL as SQLAlchemy needs it to use the psycopg2 driver rtrl installs (SQLAlchemy 2.1 takes plain
    `postgresql://` for psycopg 3); any other URL as it is. The MLflow server's backend store and Dagster's
    storage pass through it."""
    scheme, sep, rest = url.partition("://")
    return f"postgresql+psycopg2://{rest}" if scheme in ("postgresql", "postgres") and sep else url


def bin_dir() -> Path:
    """The folder of the server binaries (`initdb`, `postgres`, `pg_ctl`): `pg_config --bindir`, else the newest
    /usr/lib/postgresql/<N>/bin (Debian installs them there, off the PATH)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    if found:
        return found[-1].parent
    if shutil.which("pg_config"):
        d = Path(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip())
        if (d / "postgres").exists():
            return d
    raise StackError("no Postgres server found: install the system package (apt-get install postgresql; "
                     "./infra/setup.sh does as root)")


class LocalPostgres:
    def __init__(self, state_dir: Path, port: int, host: str = "127.0.0.1", startup_timeout_s: float = 60.0):
        if host not in LOOPBACK:
            raise StackError(f"the local Postgres trusts local connections and binds to loopback only, not {host!r}; "
                             "a Postgres reachable from other hosts is your own managed one (docs/deployment.md)")
        self.state_dir, self.port, self.host = Path(state_dir), port, host
        self.timeout_s = startup_timeout_s
        self.proc = ManagedProcess("postgres", self.state_dir)
        self._as_root = os.geteuid() == 0
        self.data_dir = self._data_dir()

    # --- where it runs ------------------------------------------------------------------------------------------

    def _runs_as(self) -> list[str]:
        """The argv prefix that runs a server binary as the server's user (root: the `postgres` user)."""
        if not self._as_root:
            return []
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise StackError("Postgres does not run as root, and there is no `postgres` user to run it as "
                             "(the Debian package makes one)") from None
        return ["runuser", "-u", "postgres", "--"]

    def _reachable_by_server(self, path: Path) -> bool:
        if not self._as_root:
            return True
        probe = path
        while not probe.exists():
            probe = probe.parent
        return subprocess.run([*self._runs_as(), "test", "-x", str(probe)], capture_output=True).returncode == 0

    def _data_dir(self) -> Path:
        own = self.state_dir / "postgres"
        if self._reachable_by_server(self.state_dir):
            return own
        key = hashlib.sha256(str(self.state_dir.resolve()).encode()).hexdigest()[:12]
        return Path("/var/lib/postgresql/rtrl") / key

    def _as_server_user(self, path: Path) -> None:
        if self._as_root:
            shutil.chown(path, "postgres", "postgres")

    # --- life cycle ------------------------------------------------------------------------------------------------

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@{self.host}:{self.port}/{database}"

    def initialized(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    def init(self) -> None:
        if self.initialized():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for d in (self.data_dir.parent, self.data_dir):   # <state_dir> stays root's; the rtrl/ folder is the server's
            if d != self.state_dir:
                self._as_server_user(d)
        r = subprocess.run([*self._runs_as(), str(bin_dir() / "initdb"), "-D", str(self.data_dir), "-U", USER,
                            "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"], capture_output=True, text=True)
        if r.returncode != 0:
            raise StackError(f"initdb failed in {self.data_dir}: {r.stderr.strip()[-2000:]}")

    def start(self) -> str:
        """Start the server (initialised on first use); its `postgres` database URL. Idempotent."""
        if self.proc.is_running():
            return self.url()
        if not port_is_free(self.host, self.port):
            raise StackError(f"port {self.port} on {self.host} is taken; choose another Postgres port")
        self.init()
        sockets = self.data_dir   # its Unix socket next to its data, not in /run/postgresql (may not exist)
        self.proc.start([*self._runs_as(), str(bin_dir() / "postgres"), "-D", str(self.data_dir), "-p",
                         str(self.port), "-h", self.host, "-k", str(sockets), "-c", "max_connections=200",
                         "-c", "fsync=on"], extra={"url": self.url(), "data_dir": str(self.data_dir)})
        self.proc.wait_healthy(self._ready, self.timeout_s, f"connections on {self.host}:{self.port}")
        return self.url()

    def _ready(self) -> bool:
        if not port_accepts(self.host, self.port):
            return False
        try:
            self.execute("SELECT 1")
        except Exception:  # noqa: BLE001 -- "the database system is starting up" until it is not
            return False
        return True

    def execute(self, sql: str, database: str = "postgres") -> list[tuple]:
        import psycopg2

        conn = psycopg2.connect(self.url(database), connect_timeout=5)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def create_database(self, name: str) -> str:
        """Create database `name` unless it exists; its URL."""
        if not name.replace("_", "").isalnum():
            raise ValueError(f"bad database name {name!r}: letters, digits and _")
        if not self.execute(f"SELECT 1 FROM pg_database WHERE datname = '{name}'"):
            self.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self, timeout_s: float = 20.0) -> bool:
        """A fast shutdown (open sessions are ended, nothing is lost); SIGKILL after `timeout_s`."""
        if not self.proc.is_running():
            return False
        subprocess.run([*self._runs_as(), str(bin_dir() / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "fast",
                        "-w", "-t", str(int(timeout_s))], capture_output=True)
        deadline = time.monotonic() + 5
        while self.proc.is_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.proc.stop(timeout_s=2.0) or True

    def destroy(self) -> None:
        """Stop and delete the data folder (a test's throwaway cluster)."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
