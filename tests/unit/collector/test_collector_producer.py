"""Group commit: while one Kafka send is in flight, the batches of other requests wait and go out together."""

from __future__ import annotations

import asyncio
import threading

import pytest

from instrumentation.collector.producer import GroupProducer
from instrumentation.transport import Record, TransportError
from tests.waiting import wait_for_async


class GatedTransport:
    """The first send blocks until `gate` is set; `fail_from` makes sends from that call on raise."""

    def __init__(self, fail_from: int | None = None):
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.sends: list[list[Record]] = []
        self.fail_from = fail_from
        self.closed = False

    def send(self, records):
        self.entered.set()
        self.gate.wait(10)
        self.sends.append(list(records))
        if self.fail_from is not None and len(self.sends) > self.fail_from:
            raise TransportError("broker down (fake)")

    def close(self):
        self.closed = True


def _batch(tag: str, n: int) -> list[Record]:
    return [Record("telemetry.edits", b"u", f"{tag}-{i}".encode()) for i in range(n)]


async def _produce_while_first_send_blocks(producer, transport, later: list[list[Record]]):
    first = asyncio.ensure_future(producer.produce(_batch("a", 2)))
    await asyncio.to_thread(transport.entered.wait, 10)  # send #1 is in flight
    others = [asyncio.ensure_future(producer.produce(b)) for b in later]
    await wait_for_async(lambda: producer._queue.qsize() == len(later), 10, "the later batches queued")
    transport.gate.set()
    return await asyncio.gather(first, *others, return_exceptions=True)


def test_batches_queued_during_a_send_go_out_in_one_send():
    transport = GatedTransport()
    producer = GroupProducer(transport)
    later = [_batch("b", 3), _batch("c", 1), _batch("d", 4)]
    results = asyncio.run(_produce_while_first_send_blocks(producer, transport, later))
    producer.close()
    assert results == [None] * 4
    assert [len(s) for s in transport.sends] == [2, 8]
    assert transport.sends[1] == [r for b in later for r in b]
    assert transport.closed


def test_a_failed_send_fails_every_request_in_its_group_and_only_those():
    transport = GatedTransport(fail_from=1)  # the first send succeeds, the second fails
    producer = GroupProducer(transport)
    results = asyncio.run(_produce_while_first_send_blocks(producer, transport, [_batch("b", 1), _batch("c", 1)]))
    producer.close()
    assert results[0] is None
    assert all(isinstance(r, TransportError) for r in results[1:])


def test_group_size_is_bounded():
    transport = GatedTransport()
    producer = GroupProducer(transport, max_group_records=5)
    results = asyncio.run(_produce_while_first_send_blocks(producer, transport, [_batch(t, 3) for t in "bcd"]))
    producer.close()
    assert results == [None] * 4
    assert [len(s) for s in transport.sends] == [2, 6, 3]


def test_unexpected_transport_exception_fails_the_request_instead_of_hanging():
    class Broken:
        def send(self, records):
            raise KeyError("bug")

        def close(self):
            pass

    producer = GroupProducer(Broken())
    with pytest.raises(TransportError, match="KeyError"):
        asyncio.run(producer.produce(_batch("a", 1)))
    producer.close()
