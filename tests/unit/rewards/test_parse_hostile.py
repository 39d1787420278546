"""Regressions found by `rtrl bench fuzz`: inputs for which `ParseEventsFn` could not even make its dead
letter (text with lone surrogates, a decoded JSON value that is no object) now go to the dead-letter output."""

from __future__ import annotations

import apache_beam as beam
import pytest

from pipelines.archive.deadletter import INVALID_JSON, NOT_AN_OBJECT, dead_letter_table
from pipelines.rewards.parse import DEAD_LETTER, ParseEventsFn


@pytest.mark.parametrize("raw, reason", [
    ('{"event_type": "\udcc0\udcaf"}', None),        # text decoded with errors="surrogateescape"
    ('{"text": "\ud800', INVALID_JSON),                # truncated, with a lone surrogate
    ([1, 2, 3], NOT_AN_OBJECT),                         # a decoded JSON value that is no event
    (7, NOT_AN_OBJECT),
    ({1: "non-string key"}, None),
])
def test_hostile_raw_input_is_dead_lettered_with_a_reason_and_the_dead_letter_can_be_written(raw, reason):
    [out] = list(ParseEventsFn().process(raw))
    assert isinstance(out, beam.pvalue.TaggedOutput) and out.tag == DEAD_LETTER
    dead = out.value
    assert dead.reason == reason if reason else dead.reason
    assert dead.detail and dead.message.value
    assert dead_letter_table([dead], "c").num_rows == 1
