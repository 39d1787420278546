"""What a training run leaves on disk (trainer/scratch.py): only the newest complete step checkpoint is kept, and a
run of another cycle removes the run folders of cycles that failed for good, never an org lineage's run root."""

from pathlib import Path

from trainer.scratch import remove, stale_runs, stale_step_checkpoints


def _steps(root: Path, tags: list[str], latest: str | None) -> Path:
    steps = root / "steps"
    for tag in tags:
        (steps / tag).mkdir(parents=True)
        (steps / tag / "mp_rank_00_model_states.pt").write_bytes(b"x")
    steps.mkdir(parents=True, exist_ok=True)
    (steps / "zero_to_fp32.py").write_text("# DeepSpeed's script, kept next to the tags\n")
    if latest is not None:
        (steps / "latest").write_text(latest)
    return steps


def test_every_step_checkpoint_but_the_one_latest_names_is_stale(tmp_path):
    steps = _steps(tmp_path, ["step1", "step2", "step3"], "step3")
    assert stale_step_checkpoints(steps) == [steps / "step1", steps / "step2"]
    remove(stale_step_checkpoints(steps))
    assert sorted(p.name for p in steps.iterdir()) == ["latest", "step3", "zero_to_fp32.py"]
    assert stale_step_checkpoints(steps) == []


def test_a_save_killed_half_way_keeps_the_checkpoint_latest_still_names(tmp_path):
    # step3's files were being written when the run died: latest was not moved to it yet
    steps = _steps(tmp_path, ["step2", "step3"], "step2")
    assert stale_step_checkpoints(steps) == [steps / "step3"]


def test_nothing_is_stale_while_no_checkpoint_is_known_to_be_complete(tmp_path):
    assert stale_step_checkpoints(_steps(tmp_path / "a", ["step1"], None)) == []
    assert stale_step_checkpoints(_steps(tmp_path / "b", ["step1"], "step9")) == []      # names no folder
    assert stale_step_checkpoints(_steps(tmp_path / "c", ["step1"], "")) == []
    assert stale_step_checkpoints(tmp_path / "never-trained" / "steps") == []


def test_the_run_folders_of_other_cycles_are_stale_but_not_the_orgs_run_roots(tmp_path):
    root = tmp_path / "train"                      # the shared lineage's run root
    for name in ("c1", "c2", "c3", "org-acme/c1", "org-acme/c3", "org-globex/c2"):
        (root / name / "steps").mkdir(parents=True)
    (root / "notes.txt").write_text("not a run folder")
    assert stale_runs(root, "c3") == [root / "c1", root / "c2"]
    assert stale_runs(root / "org-acme", "c3") == [root / "org-acme" / "c1"]     # an org's root: its own cycles
    assert stale_runs(tmp_path / "no-runs-yet", "c1") == []


def test_removing_what_is_already_gone_is_fine(tmp_path):
    (tmp_path / "run" / "checkpoint").mkdir(parents=True)
    remove([tmp_path / "run", tmp_path / "run", tmp_path / "never-was"])
    assert not (tmp_path / "run").exists()
