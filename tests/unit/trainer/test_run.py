"""`run_training` end to end on a tiny checkpoint: champion from the registry, a reward table on disk, a
candidate version registered with its lineage and metrics in MLflow; a second run of the cycle does nothing. What a run
leaves on disk: nothing of its own once the candidate is registered, nor of earlier cycles that failed for good."""

import polars as pl
import pytest

from registry.client import Registry
from tests.unit.trainer.tiny import sampled_rows, tiny_checkpoint
from trainer.config import TrainerConfig
from trainer.run import run_training
from trainer.selection import SelectionError

pytestmark = pytest.mark.slow


def test_candidate_is_registered_with_lineage_metrics_and_config_and_a_rerun_is_a_no_op(tmp_path):
    reg = Registry(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", "policy", tmp_path / "cache")
    v1 = reg.register(tiny_checkpoint(tmp_path / "v1"), tags={"parent": ""})
    reg.set_alias("champion", v1)
    rows = sampled_rows(reg.local_path(v1), 44, version=v1)
    rows = rows.with_columns(cut_short=pl.Series([i < 4 for i in range(rows.height)]))   # clients that left
    table = tmp_path / "rewards" / "policy_version=1" / "window=c1"
    table.mkdir(parents=True)
    other = sampled_rows(reg.local_path(v1), 5, seed=1, version="7").with_columns(
        request_id=rows["request_id"].head(5) + "x", cut_short=pl.lit(False))
    rows.vstack(other).write_parquet(table / "part-0.parquet")
    cfg = TrainerConfig(micro_batch=4, rows_per_step=16, lr=1e-3, max_tokens=8, min_rows=8, threads=1)
    failed = tmp_path / "train" / "c0" / "steps" / "step1"          # a cycle that failed for good left its scratch
    org_run = tmp_path / "train" / "org-acme" / "c0" / "steps"      # an org lineage's run root is not a cycle's
    failed.mkdir(parents=True)
    org_run.mkdir(parents=True)
    result = run_training(cfg, reg, tmp_path / "rewards", "c1", tmp_path / "train", log=lambda *_: None)
    assert result.candidate == "2" and result.parent == "1" and result.steps == 3
    assert result.counts["kept_on_policy"] == 40 and result.counts["dropped_other_version"] == 5
    assert result.counts["dropped_cut_short"] == 4                       # trainer.train_on_cut_short is off
    tags = reg.info("2").tags
    assert tags["candidate"] == "true" and tags["parent"] == "1" and tags["cycle"] == "c1"
    history = reg.client.get_metric_history(tags["train_run"], "loss")
    assert [m.step for m in history] == [1, 2, 3]
    params = reg.client.get_run(tags["train_run"]).data.params
    assert params["lr"] == "0.001" and params["rows_per_step"] == "16" and len(params) == len(cfg.model_dump())
    assert (reg.local_path("2") / "rtrl_metadata.json").is_file()
    # the registry holds the candidate: the run folder (step checkpoints, candidate folder) is gone, and so is c0's
    assert not (tmp_path / "train" / "c1").exists() and not (tmp_path / "train" / "c0").exists()
    assert org_run.is_dir()
    (tmp_path / "train" / "c1" / "checkpoint").mkdir(parents=True)  # a run that stopped before it removed it
    again = run_training(cfg, reg, tmp_path / "rewards", "c1", tmp_path / "train", log=lambda *_: None)
    assert again.already_done and again.candidate == "2" and not (tmp_path / "train" / "c1").exists()
    with pytest.raises(SelectionError, match="minimum batch"):
        run_training(cfg.model_copy(update={"min_rows": 1000}), reg, tmp_path / "rewards", "c2", tmp_path / "train",
                     log=lambda *_: None)


def _live_engines() -> int:
    import gc

    gc.collect()
    return sum(type(o).__name__ == "DeepSpeedEngine" for o in gc.get_objects())


def test_training_twice_in_one_process_leaves_no_engine_behind_even_when_a_run_fails(tmp_path):
    """The in-process executor trains every cycle in one process: each engine (its model, masters and optimizer
    state) is released when its training ends, whether it registered a candidate or raised."""
    reg = Registry(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", "policy", tmp_path / "cache")
    v1 = reg.register(tiny_checkpoint(tmp_path / "v1"), tags={"parent": ""})
    reg.set_alias("champion", v1)
    rows = sampled_rows(reg.local_path(v1), 16, version=v1)
    for cycle in ("c1", "c2", "c3"):
        table = tmp_path / "rewards" / "policy_version=1" / f"window={cycle}"
        table.mkdir(parents=True)
        rows.write_parquet(table / "part-0.parquet")
    cfg = TrainerConfig(micro_batch=4, rows_per_step=8, lr=1e-3, max_tokens=8, min_rows=8, threads=1)
    before = _live_engines()
    for cycle in ("c1", "c2"):
        run_training(cfg, reg, tmp_path / "rewards", cycle, tmp_path / "train", window=cycle, log=lambda *_: None)
        reg.set_alias("champion", v1)        # the next cycle trains v1's rows again
    assert _live_engines() == before

    def crash(m):
        raise RuntimeError("the step failed")

    with pytest.raises(RuntimeError, match="the step failed"):
        run_training(cfg, reg, tmp_path / "rewards", "c3", tmp_path / "train", window="c3", on_step=crash,
                     log=lambda *_: None)
    assert _live_engines() == before
