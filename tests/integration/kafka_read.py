"""Read JSON records of some topic partitions from the beginning until the test has what it waits for."""

from __future__ import annotations

import json
from typing import Callable

from tests.waiting import wait_for


def read_json_records(bootstrap: str, partitions: list[tuple[str, int]], key_of: Callable[[dict], str | None],
                      enough: Callable[[dict[str, dict]], bool], deadline_s: float) -> dict[str, dict]:
    """{key_of(record): record} over the JSON-object records of `partitions` ((topic, partition) pairs) whose
    key_of is not None, polled from the beginning until `enough(found)`; AssertionError after `deadline_s`."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    found: dict[str, dict] = {}
    try:
        consumer.assign([TopicPartition(t, p) for t, p in partitions])
        consumer.seek_to_beginning()

        def poll() -> bool:
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    try:
                        d = json.loads(r.value)
                    except ValueError:
                        continue
                    if isinstance(d, dict) and (key := key_of(d)) is not None:
                        found[key] = d
            return enough(found)

        wait_for(poll, deadline_s, lambda: f"enough records on {partitions} (found {len(found)})", interval_s=0)
        return found
    finally:
        consumer.close()
