"""Specialization by organization (trainer/specialize.py, run_training with `org`): an org's adapter trains on that
org's rows alone -- no row of another org reaches it -- and is registered in the org's own lineage over the shared
champion; the next cycle continues it while the shared champion stays, and starts over when it moves."""

import polars as pl
import pytest

from registry.client import Registry, org_model, parse_label, version_label
from tests.unit.trainer.tiny import sampled_rows, small_trainer_config, tiny_checkpoint
from trainer import train as train_module
from trainer.run import run_training
from trainer.specialize import IsolationError, check_isolation, org_rows

pytestmark = pytest.mark.slow


def _table(tmp_path, window: str, parts: list[pl.DataFrame]) -> None:
    d = tmp_path / "rewards" / "policy_version=x" / f"window={window}"
    d.mkdir(parents=True)
    pl.concat(parts, how="diagonal_relaxed").write_parquet(d / "part-0.parquet")


def _org(rows: pl.DataFrame, org: str, prefix: str) -> pl.DataFrame:
    return rows.with_columns(org_id=pl.lit(org), request_id=prefix + pl.col("request_id"))


@pytest.fixture
def spy(monkeypatch):
    """The rows every Trainer is built with, by the org of its run."""
    seen: list[pl.DataFrame] = []
    real = train_module.Trainer.__init__

    def init(self, cfg, rows, *args, **kw):
        seen.append(rows)
        real(self, cfg, rows, *args, **kw)

    monkeypatch.setattr(train_module.Trainer, "__init__", init)
    return seen


def test_an_orgs_adapter_trains_on_its_rows_alone_in_its_own_lineage(tmp_path, spy):
    reg = Registry(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", "policy", tmp_path / "cache")
    v1 = reg.register(tiny_checkpoint(tmp_path / "v1"), tags={"parent": ""})
    reg.set_alias("champion", v1)
    folder = reg.local_path(v1)
    a, b = _org(sampled_rows(folder, 24, version=v1), "acme", "a"), _org(sampled_rows(folder, 24, 1, v1), "globex", "b")
    _table(tmp_path, "c1", [a, b])
    cfg = small_trainer_config(lora_r=4, min_rows=8)
    result = run_training(cfg, reg, tmp_path / "rewards", "c1", tmp_path / "train", log=lambda *_: None, org="acme")
    assert result.org == "acme" and result.parent == v1 and result.counts["kept_on_policy"] == 24
    assert set(spy[-1]["org_id"]) == {"acme"} and set(spy[-1]["request_id"]) == set(a["request_id"])
    acme = reg.for_org("acme")
    assert acme.model == org_model("policy", "acme") == "policy.org-acme" and reg.orgs() == ["acme"]
    tags = acme.info(result.candidate).tags
    assert (tags["org"], tags["adapter"], tags["lora_base"], tags["lora_base_model"]) == ("acme", "true", v1, "policy")
    assert reg.version_of("champion") == v1 and len(reg.client.search_model_versions("name='policy'")) == 1

    # cycle 2: acme's champion is its adapter over the same shared champion: continued, its rows on-policy
    acme.set_alias("champion", result.candidate)
    label = version_label(result.candidate, "acme")
    _table(tmp_path, "c2", [a.with_columns(policy_version=pl.lit(label), request_id="2" + pl.col("request_id")),
                            b.with_columns(policy_version=pl.lit(label), request_id="2" + pl.col("request_id"))])
    again = run_training(cfg, reg, tmp_path / "rewards", "c2", tmp_path / "train", window="c2", log=lambda *_: None,
                         org="acme")
    assert again.parent == label and parse_label(again.parent) == (result.candidate, "acme")
    assert again.counts["kept_on_policy"] == 24 and set(spy[-1]["org_id"]) == {"acme"}
    assert acme.info(again.candidate).tags["parent"] == label

    # the shared champion moves: acme's next adapter starts over the new one
    v2 = reg.register(tiny_checkpoint(tmp_path / "v2", seed=2), tags={"parent": v1})
    reg.set_alias("champion", v2)
    _table(tmp_path, "c3", [a.with_columns(policy_version=pl.lit(v2), request_id="3" + pl.col("request_id"))])
    third = run_training(cfg, reg, tmp_path / "rewards", "c3", tmp_path / "train", window="c3", log=lambda *_: None,
                         org="acme")
    assert third.parent == v2 and acme.info(third.candidate).tags["lora_base"] == v2


def test_a_selection_holding_another_orgs_row_is_refused():
    rows = pl.DataFrame({"request_id": ["r1", "r2"], "org_id": ["acme", "globex"]})
    assert org_rows(rows, "acme")["request_id"].to_list() == ["r1"]
    check_isolation(org_rows(rows, "acme"), "acme")
    with pytest.raises(IsolationError, match="globex"):
        check_isolation(rows, "acme")


def test_an_org_adapter_needs_lora_and_an_org_id_fit_for_a_model_name(tmp_path):
    reg = Registry(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", "policy", tmp_path / "cache")
    with pytest.raises(ValueError, match="lora_r"):
        run_training(small_trainer_config(), reg, tmp_path / "rewards", "c1", tmp_path / "train", org="acme")
    with pytest.raises(ValueError, match="org id"):
        reg.for_org("a/b")


def test_an_adapter_trains_with_the_specialize_sections_rank_rate_and_batch():
    from trainer.config import SpecializeConfig, TrainerConfig

    shared = TrainerConfig(lr=3e-4, rows_per_step=128, min_rows=64, max_rows=1024)
    t = SpecializeConfig(lora_r=4, lora_alpha=8, lr=2e-3, rows_per_step=32, max_rows=96, min_rows=100).trainer(shared)
    assert (t.lora_r, t.lora_alpha, t.lr, t.rows_per_step, t.max_rows, t.min_rows) == (4, 8, 2e-3, 32, 96, 100)
    assert t.loss == shared.loss and shared.lora_r == 0 and shared.lr == 3e-4   # the rest is the shared trainer's
