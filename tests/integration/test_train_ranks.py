"""`rtrl train` on 2 CPU ranks (torchrun, gloo) at ZeRO-1 and -3 (the default tier) and -2 (`full`), against the same
global batch on one rank, through `rtrl bench ranks --json --zero-stage ...` (one one-rank reference, one 2-rank run
per stage): exactly one candidate registered (rank 0's), the step's weights within the stated tolerance of the
one-rank run's, the step's loss and gradient norm the same, and the checkpoint (gathered from the shards at ZeRO-3)
reloads in transformers with the one-rank checkpoint's logits. The benchmark's command and verdict are what is tested."""

import json
import subprocess
import sys

import pytest

from infra.bench.ranks_cycle import TOLERANCE

pytestmark = [pytest.mark.integration, pytest.mark.slow]


# the default tier runs ZeRO-3 (partitioned weights: the stage with the most rank-specific code); 1 and 2 in full
@pytest.mark.parametrize("stages", [pytest.param([3], id="zero-3"),
                                    pytest.param([1, 2], id="zero-1-2", marks=pytest.mark.full)])
def test_two_ranks_at_each_zero_stage_register_one_candidate_with_the_one_rank_weights(stages):
    proc = subprocess.run([sys.executable, "-m", "infra.cli", "bench", "ranks", "--json", "--zero-stage",
                           *map(str, stages)], capture_output=True, text=True, timeout=900)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, (result, proc.stderr[-3000:])
    listed = result.get("stages", [result])
    assert [s["zero_stage"] for s in listed] == stages and result["zero_stage"] == stages[-1]
    for stage in listed:
        assert stage["ranks"] == 2 and stage["candidates_registered"] == 1 and stage["summary_lines"] == 1, stage
        assert stage["max_abs_weight_diff_vs_one_rank"] <= stage["tolerance"] == TOLERANCE, stage
        assert stage["max_abs_weight_change"] > 100 * TOLERANCE, stage     # the step moved the weights
        assert stage["reloaded_logits_match"] and stage["saved_dtype"] == "torch.float32", stage
        assert stage["loss_rel_diff"] <= stage["metric_tolerance"] >= stage["grad_norm_rel_diff"], stage
