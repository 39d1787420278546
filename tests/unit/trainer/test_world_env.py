"""A world of one's distributed variables: a launcher's are kept; those a parent process set for its own world of
one (a cycle step that trained in the orchestrator's process, then started a process that trains) are not, so the
child picks a port of its own instead of the one the parent's process group holds."""

import os

from trainer.engine import OWN_WORLD, WORLD_VARS, _single_process_env
from trainer.launch import launch_env


def _clean(monkeypatch):
    for k in (*WORLD_VARS, OWN_WORLD):
        monkeypatch.delenv(k, raising=False)


def test_alone_a_process_sets_a_world_of_one_on_a_free_port_and_marks_it_its_own(monkeypatch):
    _clean(monkeypatch)
    _single_process_env()
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ[OWN_WORLD]) == ("0", "1", str(os.getpid()))
    port = os.environ["MASTER_PORT"]
    _single_process_env()
    assert os.environ["MASTER_PORT"] == port, "its own world is kept on a second training in the same process"


def test_a_world_a_parent_set_for_itself_is_not_inherited(monkeypatch):
    _clean(monkeypatch)
    parent = os.getpid() + 1
    monkeypatch.setenv("MASTER_PORT", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv(OWN_WORLD, str(parent))
    _single_process_env()
    assert os.environ["MASTER_PORT"] != "1" and os.environ[OWN_WORLD] == str(os.getpid())


def test_a_launchers_world_is_kept_and_the_ranks_get_none_of_a_parents(monkeypatch):
    _clean(monkeypatch)
    for k, v in {"MASTER_PORT": "29511", "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(k, v)
    _single_process_env()
    assert (os.environ["MASTER_PORT"], os.environ["RANK"], os.environ["WORLD_SIZE"]) == ("29511", "1", "2")
    assert OWN_WORLD not in os.environ
    env = launch_env(2, {**os.environ, OWN_WORLD: "7", "MASTER_PORT": "1"})
    assert not {*WORLD_VARS, OWN_WORLD} & set(env)
