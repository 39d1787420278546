"""Property tests: every valid event survives model -> wire -> model and model -> Arrow -> model unchanged."""

from hypothesis import HealthCheck, given, settings

from schemas import from_arrow, parse_wire, to_arrow, to_wire, arrow_schema
from tests.unit.schemas.strategies import any_event

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(any_event)
def test_wire_round_trip_returns_the_same_event(event):
    assert parse_wire(to_wire(event)) == event


@SETTINGS
@given(any_event)
def test_arrow_round_trip_returns_the_same_event_with_the_declared_schema(event):
    table = to_arrow([event], event.event_type)
    assert table.schema.equals(arrow_schema(event.event_type), check_metadata=True)
    assert from_arrow(table) == [event]
