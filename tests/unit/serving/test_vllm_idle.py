"""serving/vllm_idle.py: vLLM's shared-memory queue readers stop busy-polling after `serving.busy_poll_ms`, and a
reader that went to sleep is still woken by the next write."""

import threading
import time

import pytest

shm = pytest.importorskip("vllm.distributed.device_communicators.shm_broadcast")
zmq = pytest.importorskip("zmq")

from serving import vllm_idle  # noqa: E402


@pytest.fixture
def patched(monkeypatch):
    original = shm.SpinCondition.wait
    monkeypatch.setenv(vllm_idle.ENV, "5")
    vllm_idle.register()
    yield
    shm.SpinCondition.wait = original


def _pair(tag: str):
    ctx = zmq.Context()
    addr = f"inproc://rtrl-idle-{tag}"
    writer = shm.SpinCondition(is_reader=False, context=ctx, notify_address=addr)
    reader = shm.SpinCondition(is_reader=True, context=ctx, notify_address=addr)
    return ctx, writer, reader


def test_a_reader_busy_polls_for_the_configured_window_not_vllms_second(patched):
    ctx, writer, reader = _pair("window")
    assert reader.busy_loop_s == 1
    reader.wait(timeout_ms=1)
    assert reader.busy_loop_s == pytest.approx(0.005)
    ctx.destroy(linger=0)


def test_a_sleeping_reader_is_woken_by_the_next_write(patched):
    ctx, writer, reader = _pair("wake")
    time.sleep(0.3)                      # the SUB socket's subscription reaches the PUB side
    reader.record_read()
    time.sleep(0.02)                     # past the 5 ms window: the next wait blocks on the wake-up socket
    threading.Timer(0.2, writer.notify).start()
    t0 = time.monotonic()
    reader.wait(timeout_ms=5000)
    waited = time.monotonic() - t0
    assert 0.1 < waited < 2.0            # slept (did not spin through), and the write woke it long before the timeout
    ctx.destroy(linger=0)


def test_without_the_setting_vllms_busy_polling_is_left_alone(monkeypatch):
    original = shm.SpinCondition.wait
    monkeypatch.delenv(vllm_idle.ENV, raising=False)
    vllm_idle.register()
    assert shm.SpinCondition.wait is original
