"""A population can run in slices (`Population(only=...)`, e.g. one per process) and on a thread per user with the
deterministic clock (`concurrent=True`): the events are those of the one-thread run, because a user's story
depends only on the seed and the policy's answers."""

from datetime import timedelta

from codetasks.policy import ErrorRates, ReferencePolicy
from instrumentation.simulator.clock import StepClock
from instrumentation.simulator.config import SimulatorConfig
from instrumentation.simulator.population import Population
from instrumentation.simulator.user import ListSink


def _events(cfg: SimulatorConfig, only: range | None = None, concurrent: bool = False) -> list:
    clock = StepClock(latency_s=cfg.deterministic_latency_s)
    sink = ListSink()
    policy = ReferencePolicy(3, ErrorRates(wrong=0.2, broken=0.1, needless=0.1))
    Population(cfg, policy, sink, clock, only=only, concurrent=concurrent).run(clock.start + timedelta(hours=1))
    return sorted((e.model_dump_json() for e in sink.events))


def test_two_slices_on_threads_give_the_events_of_the_whole_population_on_one_thread():
    cfg = SimulatorConfig(users=6, seed=4)
    whole = _events(cfg)
    sliced = _events(cfg, range(0, 6, 2), concurrent=True) + _events(cfg, range(1, 6, 2), concurrent=True)
    assert len(whole) > 50 and sorted(sliced) == whole
