"""One thread owns the Kafka transport; batches of concurrent requests are sent together (group commit).

The transport is not thread-safe, and a Kafka send waits for acks=all, so a request's cost is mostly the broker's
round trip. While one send is in flight, batches from other requests queue up; the next send takes all of them
(up to `max_group_records`) in one call, so N concurrent clients share one round trip instead of queueing for N.
Each request's future resolves only when the send that carried its records returned: success means every one of
its records was acknowledged; a `TransportError` fails every request of that group (none can assume delivery).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import Future

from instrumentation.transport import Record, Transport, TransportError

_STOP = object()


class GroupProducer:
    def __init__(self, transport: Transport, *, max_group_records: int = 5000):
        self.transport = transport
        self.max_group_records = max_group_records
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="rtrl-produce", daemon=True)
        self._thread.start()
        self.sends = 0  # Kafka send calls made (tests and stats: groups, not requests)

    def queued(self) -> int:
        """Batches waiting for the producer thread (approximate: a gauge's reading)."""
        return self._queue.qsize()

    async def produce(self, records: list[Record]) -> None:
        """Returns once Kafka acknowledged every record; raises TransportError otherwise."""
        fut: Future = Future()
        self._queue.put((records, fut))
        await asyncio.wrap_future(fut)

    def _next_group(self, first) -> list:
        group, n = [first], len(first[0])
        while n < self.max_group_records:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                self._queue.put(_STOP)  # finish this group, then stop
                break
            group.append(item)
            n += len(item[0])
        return group

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            # a request abandoned before its turn (client gone, server stopping) is not sent at all
            group = [(recs, fut) for recs, fut in self._next_group(first) if fut.set_running_or_notify_cancel()]
            if not group:
                continue
            records = [r for recs, _ in group for r in recs]
            try:
                self.transport.send(records)
                error = None
            except TransportError as e:
                error = e
            except Exception as e:  # noqa: BLE001 -- an unexpected transport bug must fail the requests, not hang them
                error = TransportError(f"transport failed: {type(e).__name__}: {e}")
            self.sends += 1
            for _, fut in group:
                if error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(error)

    def close(self) -> None:
        """Send what is queued, stop the thread, close the transport."""
        self._queue.put(_STOP)
        self._thread.join()
        self.transport.close()
