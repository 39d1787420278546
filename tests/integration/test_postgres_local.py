"""The local Postgres of the services topology (infra/stack/postgres.py): from the system packages, on loopback."""

from __future__ import annotations

import uuid

import pytest

from infra.stack.postgres import LocalPostgres
from infra.stack.process import StackError
from tests.conftest import free_port

pytestmark = pytest.mark.integration


def test_a_database_survives_a_restart_of_the_local_postgres(tmp_path):
    pg = LocalPostgres(tmp_path, free_port())
    try:
        pg.start()
        url = pg.create_database("kept")
        assert url.endswith("/kept") and pg.create_database("kept") == url     # idempotent
        pg.execute("CREATE TABLE t (x int); INSERT INTO t VALUES (7)", "kept")
        assert pg.stop()
        assert not pg.proc.is_running()
        pg.start()
        assert pg.execute("SELECT x FROM t", "kept") == [(7,)]
    finally:
        pg.destroy()
    assert not pg.data_dir.exists()


def test_the_local_postgres_refuses_a_host_beyond_loopback(tmp_path):
    with pytest.raises(StackError, match="loopback"):
        LocalPostgres(tmp_path, free_port(), host="0.0.0.0")


def test_the_session_postgres_gives_each_test_its_own_database(postgres_server):
    name = f"t_{uuid.uuid4().hex[:8]}"
    url = postgres_server.create_database(name)
    assert postgres_server.execute("SELECT current_database()", name) == [(name,)]
    assert url == postgres_server.url(name)
