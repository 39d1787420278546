"""serving/vllm_idle.py: vLLM's shared-memory queue readers stop busy-polling after `serving.busy_poll_ms`, and a
reader that went to sleep is still woken by the next write. The patch is rtrl's engines' own: off by default, applied
by the executor `serving.engine` gives an engine when the setting is on, never a plugin of the environment.

The checks run in one child interpreter of their own: importing vLLM changes Triton's state for the rest of the
process (the trainer's Triton-interpreter tests then fail), and the patch changes a vLLM class."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed", allow_module_level=True)

REPO = Path(__file__).parents[3]

CHILD = r'''
import json, os, sys, threading, time
from unittest import mock
import zmq
from vllm.distributed.device_communicators import shm_broadcast as shm
from vllm.utils.import_utils import resolve_obj_by_qualname
from vllm.v1.executor.multiproc_executor import MultiprocExecutor
from serving import vllm_idle
from serving.engine import BUSY_POLL_EXECUTOR
from tests.waiting import wait_for

ORIGINAL = shm.SpinCondition.wait


def executor():
    """What the engine's executor calls, in order, with vLLM's own process start mocked out."""
    cls = resolve_obj_by_qualname(BUSY_POLL_EXECUTOR)         # how vLLM finds it (Executor.get_class)
    calls = []
    ex = object.__new__(cls)
    with mock.patch.object(vllm_idle, "register", lambda: calls.append("core")), \
            mock.patch.object(MultiprocExecutor, "_init_executor", lambda self: calls.append("workers started")), \
            mock.patch.object(cls, "collective_rpc", lambda self, fn: calls.append(fn.__name__)):
        ex._init_executor()
        ex._post_init_executor()
    return {"multiproc": issubclass(cls, MultiprocExecutor), "calls": calls}


def reader_after_register(env_value, address):
    """register() with RTRL_VLLM_BUSY_POLL_MS = env_value (None: unset), then one reader's busy window and wake-up."""
    os.environ.pop("RTRL_VLLM_BUSY_POLL_MS", None)
    if env_value is not None:
        os.environ["RTRL_VLLM_BUSY_POLL_MS"] = env_value
    vllm_idle.register()
    ctx = zmq.Context()
    writer = shm.SpinCondition(is_reader=False, context=ctx, notify_address=address)
    reader = shm.SpinCondition(is_reader=True, context=ctx, notify_address=address)
    out = {"patched": shm.SpinCondition.wait is not ORIGINAL, "window_before": reader.busy_loop_s}
    reader.wait(timeout_ms=1)
    out["window_after"] = reader.busy_loop_s
    # the SUB socket's subscription has reached the PUB side once a write's wake-up gets through (then drained)
    wait_for(lambda: (writer.notify(), reader.local_notify_socket.poll(10))[1], 30, "the subscription", interval_s=0)
    reader.local_notify_socket.recv()
    reader.record_read()
    # past the busy window: the next wait blocks on the wake-up socket
    wait_for(lambda: time.monotonic() > reader.last_read + reader.busy_loop_s, 30, "the busy window over",
             interval_s=0.001)
    write = threading.Timer(0.3, writer.notify)  # the write comes while the reader waits
    write.start()
    reader.wait(timeout_ms=None)         # no timeout: a sleeping reader returns only when the write wakes it
    write.join()
    # a sleeping reader took the write's wake-up off its socket; a spinning one returned without reading it
    out["wake_up_taken"] = reader.local_notify_socket.poll(200) == 0
    ctx.destroy(linger=0)
    return out


# unset first: the patch, once applied, stays for the interpreter's life
print(json.dumps({"executor": executor(), "unset": reader_after_register(None, "inproc://rtrl-idle-unset"),
                  "set": reader_after_register("5", "inproc://rtrl-idle-set")}))
'''


@pytest.fixture(scope="module")
def child() -> dict:
    """One child interpreter (importing vLLM takes ~15 s on 2 cores) that probes the executor, then a reader with
    the setting unset, then one with it set to 5 ms."""
    env = {k: v for k, v in os.environ.items() if k != "RTRL_VLLM_BUSY_POLL_MS"}
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.integration      # a child interpreter imports vLLM
def test_a_reader_busy_polls_for_the_configured_window_and_a_sleeping_one_is_woken_by_the_next_write(child):
    r = child["set"]
    assert r["patched"] and r["window_before"] == 1 and r["window_after"] == pytest.approx(0.005)
    # it slept on the wake-up socket (a spinning reader returns at once, leaving the write's wake-up unread) and
    # the write woke it (it waited without a timeout)
    assert r["wake_up_taken"] is True


@pytest.mark.integration      # a child interpreter imports vLLM
def test_without_the_setting_vllms_busy_polling_is_left_alone(child):
    r = child["unset"]
    assert not r["patched"] and r["window_after"] == 1


def test_the_busy_poll_is_off_by_default_and_on_only_through_the_engines_executor():
    from serving.config import ServingConfig
    from serving.engine_args import BUSY_POLL_EXECUTOR, engine_kwargs

    assert ServingConfig().busy_poll_ms == 0
    assert "distributed_executor_backend" not in engine_kwargs("m", ServingConfig(), "cpu")
    on = engine_kwargs("m", ServingConfig(busy_poll_ms=5), "cpu")
    assert on["distributed_executor_backend"] == BUSY_POLL_EXECUTOR


@pytest.mark.integration      # a child interpreter imports vLLM
def test_the_engines_executor_applies_the_patch_in_the_engine_core_then_in_every_worker(child):
    assert child["executor"] == {"multiproc": True, "calls": ["core", "workers started", "_register_in_worker"]}
