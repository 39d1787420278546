"""The metrics-cost comparison alternates off and on with neither always first (ABBA), and reports each side's
values, medians and the on/off ratio."""

from __future__ import annotations

from infra.bench.metrics_cost import alternate


def test_rounds_alternate_which_side_goes_first_and_the_ratio_is_of_the_medians():
    calls = []

    def measure(on: bool) -> float:
        calls.append(on)
        return 110.0 if on else 100.0 + len(calls)          # off drifts up with time

    out = alternate(measure, 3, log=lambda *_: None)
    assert calls == [False, True, True, False, False, True]
    assert out["off_per_s"] == [101.0, 104.0, 105.0] and out["on_per_s"] == [110.0] * 3
    assert out["off_median"] == 104.0 and out["on_over_off"] == round(110 / 104, 3)
