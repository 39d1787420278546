"""`rtrl train` on 2 CPU ranks (torchrun, gloo) at ZeRO-1, -2 and -3, against the same global batch on one rank:
exactly one candidate registered (rank 0's), the step's weights within `TOLERANCE` of the one-rank run's, the step's
loss and gradient norm the same, and the checkpoint (gathered from the shards at ZeRO-3) reloads in transformers
with the one-rank checkpoint's logits. ZeRO-1 and -2 share one one-rank reference; ZeRO-3 is `rtrl bench ranks
--json` itself (its own reference), so the benchmark's command and verdict are what is tested."""

import json
import subprocess
import sys

import pytest

from infra.bench.ranks_cycle import TOLERANCE, prepare, train_cycle, verdict

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("ranks")
    setup = prepare(root)
    return setup, train_cycle(setup, "one", 1, 1, log=print)


@pytest.mark.parametrize("zero_stage", [1, 2])
def test_two_ranks_register_one_candidate_with_the_one_rank_weights(reference, zero_stage):
    setup, one = reference
    many = train_cycle(setup, f"z{zero_stage}", 2, zero_stage, log=print)
    result, ok = verdict(one, many, setup.root / "v1")
    print(json.dumps(result))
    assert many.candidates_registered == 1 and many.summary_lines == 1
    assert many.summary["candidate"] not in ("1", one.summary["candidate"])
    assert result["max_abs_weight_diff_vs_one_rank"] <= TOLERANCE < result["max_abs_weight_change"] / 100
    assert result["reloaded_logits_match"] and result["saved_dtype"] == "torch.float32"
    assert ok, result


def test_bench_ranks_at_zero3_passes_its_checks():
    proc = subprocess.run([sys.executable, "-m", "infra.cli", "bench", "ranks", "--json"], capture_output=True,
                          text=True, timeout=600)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, (result, proc.stderr[-3000:])
    assert result["ranks"] == 2 and result["zero_stage"] == 3 and result["candidates_registered"] == 1
    assert result["max_abs_weight_diff_vs_one_rank"] <= result["tolerance"] == TOLERANCE
    assert result["reloaded_logits_match"] and result["saved_dtype"] == "torch.float32"
