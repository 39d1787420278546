"""Read JSON records of some topic partitions from the beginning until the test has what it waits for."""

from __future__ import annotations

import json
import time
from typing import Callable


def read_json_records(bootstrap: str, partitions: list[tuple[str, int]], key_of: Callable[[dict], str | None],
                      enough: Callable[[dict[str, dict]], bool], deadline_s: float) -> dict[str, dict]:
    """{key_of(record): record} over the JSON-object records of `partitions` ((topic, partition) pairs) whose
    key_of is not None, polled from the beginning until `enough(found)` or `deadline_s` passes."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    found: dict[str, dict] = {}
    try:
        consumer.assign([TopicPartition(t, p) for t, p in partitions])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline and not enough(found):
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    try:
                        d = json.loads(r.value)
                    except ValueError:
                        continue
                    if isinstance(d, dict) and (key := key_of(d)) is not None:
                        found[key] = d
        return found
    finally:
        consumer.close()
