"""Shared fixtures. Integration tests get a real Tansu broker (and its object store) started once per session.

Tiers (infra/test.sh): `--fast` runs what carries none of SPAWNING_MARKS; an unmarked test that starts a process
or listens on a socket fails, in its body or in any fixture set up for it, whatever the fixture's scope
(`_unmarked_tests_start_no_process`, `pytest_fixture_setup`), so the fast tier stays free of processes and services
whatever a test's author forgot."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from pathlib import Path

import pytest

from infra.bench.ports import free_ports
from infra.config import RtrlConfig, load_config, render_overrides


def free_port_pair() -> int:
    """A port P such that P and P+1 are free (the broker and its object store), below the ephemeral range."""
    return free_ports(2)


def stop_process(proc: subprocess.Popen, timeout_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after `timeout_s`; returns once the process is gone."""
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def free_port() -> int:
    return free_ports(1)


def make_config(state_dir: Path, *overrides: str) -> RtrlConfig:
    """The default config with an isolated state dir and free ports, plus `key=value` overrides."""
    return load_config(None, [*render_overrides({"state_dir": state_dir}), f"kafka.port={free_port_pair()}",
                              f"collector.port={free_port()}", f"mlflow.ui_port={free_port()}", *overrides])


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    """A running embedded stack (broker + object store + topics + MLflow store), shared by the session.
    Tests that stop or kill the broker must use `private_stack` instead."""
    from infra.stack.stack import Stack

    cfg = make_config(tmp_path_factory.mktemp("stack"))
    st = Stack(cfg)
    st.up(log=lambda *_: None)
    yield st
    st.down(log=lambda *_: None)


@pytest.fixture
def private_stack(tmp_path):
    """A stack of the test's own, torn down after it, for tests that stop, kill or restart the broker: its log
    lives in the object store (storage_engine "s3"), so it survives `broker.proc.stop()/kill()` + `broker.start()`."""
    from infra.stack.stack import Stack

    st = Stack(make_config(tmp_path / "state", "kafka.storage_engine=s3"))
    st.up(log=lambda *_: None)
    yield st
    st.down(log=lambda *_: None)


@pytest.fixture(scope="session")
def bootstrapped(tmp_path_factory):
    """`rtrl bootstrap` run once per session: (state dir, its JSON summary, its stderr). Tests read the registered
    v0 and must not move its aliases. The default policy set-up made (`rtrl demo --prepare` keeps it in
    .rtrl/policy-v0) is registered when it is current for this code and config, as `rtrl bootstrap` does in any
    state dir; else one is trained here (minutes) and kept in the session's own cache."""
    import json
    import subprocess

    from infra.argv import rtrl_argv
    from trainer.bootstrap.bootstrap import stale_reason

    repo = Path(__file__).parents[1]
    state = tmp_path_factory.mktemp("bootstrap-state")
    setup_cache = repo / ".rtrl" / "policy-v0"
    cache = setup_cache if not stale_reason(setup_cache, load_config(None, []).policy) else state.parent / "policy-v0"
    out = subprocess.run(rtrl_argv("bootstrap", overrides=[f'state_dir="{state}"', f'policy.cache_dir="{cache}"']),
                         capture_output=True, text=True, cwd=repo, timeout=1500)
    assert out.returncode == 0, out.stderr[-4000:]
    return state, json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


# A test that starts a process or a server carries one of these (pyproject.toml [tool.pytest] markers).
SPAWNING_MARKS = frozenset({"integration", "slow", "full"})


def _refuse(who: str, what: str):
    def refuse(*_args, **_kwargs):
        raise AssertionError(f"{who} {what} but carries none of the marks {sorted(SPAWNING_MARKS)}: mark it "
                             f"(`pytestmark = pytest.mark.integration` for processes and services, `slow` for long "
                             f"runs) so the --fast tier leaves it out")
    return refuse


def _may_spawn(item) -> bool:
    return bool(SPAWNING_MARKS & {m.name for m in item.iter_markers()})


def _refuse_processes(mp: pytest.MonkeyPatch, who: str) -> None:
    """Through `mp`: every way of starting a process (fork, posix_spawn, subprocess and multiprocessing's fork_exec)
    or a service (a listening socket) raises an AssertionError naming `who`."""
    platform.processor()   # libraries ask once (`uname -p`, cached): not the test's own process
    import _posixsubprocess
    import subprocess

    starts = _refuse(who, "starts a process")
    mp.setattr(_posixsubprocess, "fork_exec", starts)    # multiprocessing's spawn and forkserver
    mp.setattr(subprocess, "_fork_exec", starts)          # subprocess keeps its own reference
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            mp.setattr(os, name, starts)
    mp.setattr(socket.socket, "listen", _refuse(who, "listens on a socket"))


@pytest.fixture(autouse=True)
def _unmarked_tests_start_no_process(request, monkeypatch):
    """A test without a spawning mark starts no process and no service: not in its body, nor in its function-scoped
    fixtures (set up after this autouse one) nor their teardown. Fixtures of a wider scope are set up before any
    function-scoped one: `pytest_fixture_setup` below guards them."""
    if not _may_spawn(request.node):
        _refuse_processes(monkeypatch, request.node.nodeid)


_running: list = []   # the test item whose setup, call or teardown is running (pytest_runtest_protocol)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """A module-, class-, package- or session-scoped fixture set up for a test without a spawning mark starts no
    process or service either. In the --fast tier every fixture is set up for such a test (the marked ones are
    deselected), so a wider-scoped fixture that starts a broker or a server fails there, naming the test and the
    fixture. (Their teardown, run when the last test using them ends, is not guarded: it stops what a marked test's
    setup may have started.)"""
    item = _running[-1] if _running else None
    if fixturedef.scope == "function" or item is None or _may_spawn(item):
        return (yield)
    with pytest.MonkeyPatch.context() as mp:
        _refuse_processes(mp, f"{item.nodeid} (through its {fixturedef.scope}-scoped fixture {fixturedef.argname!r})")
        return (yield)


def pytest_configure(config):
    """Under pytest-xdist (infra/test.sh runs every test but the `exclusive` ones on every core), each worker and
    the processes it starts pick free ports from a slice of their own, so two workers never race for one port
    (unless RTRL_PORT_RANGE is set already: then every worker uses that range)."""
    from infra.bench.ports import RANGE_ENV, port_range

    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not worker.startswith("gw") or not count.isdigit() or os.environ.get(RANGE_ENV):
        return
    low, high = port_range()
    width = (high - low) // int(count)
    start = low + int(worker[2:]) * width
    os.environ[RANGE_ENV] = f"{start}-{start + width}"


def _long(item) -> bool:
    return item.get_closest_marker("integration") is not None and item.get_closest_marker("slow") is not None


def pytest_collection_modifyitems(config, items):
    """Files holding long integration tests (`integration` and `slow`) first, in their own order: the parallel
    phase of infra/test.sh then starts them at once instead of ending on one of them while the other workers idle.
    `gpu` tests are skipped where torch sees no GPU (never an error on the CPU machines)."""
    long_files = {item.path for item in items if _long(item)}
    items.sort(key=lambda item: item.path not in long_files)     # stable: the order within each group stays
    gpu_items = [i for i in items if i.get_closest_marker("gpu")]
    if not gpu_items:
        return
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        skip = pytest.mark.skip(reason="needs a GPU (torch.cuda.is_available() is False)")
        for item in gpu_items:
            item.add_marker(skip)
