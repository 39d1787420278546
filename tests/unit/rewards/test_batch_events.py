"""BatchEventsFn: parsed events become frames of one type, never more than max_events parsed events held."""

from pipelines.rewards.batches import EventBatch
from pipelines.rewards.compute import BatchEventsFn
from tests.unit.rewards.builders import applied, trajectory


def test_batches_are_capped_and_the_rest_flushes_at_the_end_of_the_bundle():
    fn = BatchEventsFn(max_events=2)
    fn.start_bundle()
    events = [trajectory(f"r{i}", i) for i in range(5)] + [applied("r0", 3, "ab")]
    during = [out for e in events for out in fn.process(e)]
    assert [b.value.frame.height for b in during] == [2, 2] and fn.pending["trajectory"][0].request_id == "r4"
    after = list(fn.finish_bundle())
    assert sorted((b.value.event_type, b.value.frame.height) for b in after) == [("edit_applied", 1), ("trajectory", 1)]
    assert all(isinstance(b.value, EventBatch) and b.timestamp.micros > 0 for b in during + after)
