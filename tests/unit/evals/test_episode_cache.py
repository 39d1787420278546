"""The gate's episode cache (evals/episode_cache.py): a checkpoint's stored episodes come back relabelled as the
arm that reuses them, a run with an infrastructure failure is not kept, a file of more samples per task serves a
gate of fewer (and a gate on part of the suite) and a gate of more adds its samples, and any change of suite, seed,
sampling settings or the Episode record's fields is another key; `reused_champion` only reads it when
gate.tasks.reuse_episodes is on, from the suite's folder (so another state dir's gate on the same suite finds it), and
never for a version without a digest."""

from __future__ import annotations

import pytest

from evals.episode_cache import EpisodeCache, cache_key
from evals.gate_run import reused_champion
from evals.records import Episode
from serving.config import ServingConfig
from tests.conftest import make_config


def episodes(arm: str, n: int = 4, infra: bool = False) -> list[Episode]:
    return [Episode(task_id=f"t{i // 2}", sample=i % 2, arm=arm, resolved=i % 3 == 0, policy_version="5",
                    infra_error="connection refused" if infra and i == 1 else None) for i in range(n)]


D5, D6 = "5" * 64, "6" * 64     # content digests (registry tag rtrl.content_sha256)


TASKS = ["t0", "t1"]


def test_a_stored_candidate_comes_back_as_the_champion_with_its_outcomes(tmp_path):
    cache = EpisodeCache(tmp_path, "k1", TASKS)
    assert cache.load(D5, "champion", 2) is None
    assert cache.store(D5, episodes("candidate")) == tmp_path / f"{D5[:32]}-k1.jsonl"
    back = cache.load(D5, "champion", 2)
    assert [(e.task_id, e.sample, e.resolved, e.arm) for e in back] == \
        [(e.task_id, e.sample, e.resolved, "champion") for e in episodes("candidate")]
    assert back[0].notes["reused_from"] == str(tmp_path / f"{D5[:32]}-k1.jsonl")
    assert EpisodeCache(tmp_path, "k2", TASKS).load(D5, "champion", 2) is None
    assert cache.load(D6, "champion", 2) is None
    assert [p.name for p in tmp_path.iterdir()] == [f"{D5[:32]}-k1.jsonl"], "no temporary file left"


def test_a_file_of_more_samples_serves_a_gate_of_fewer_and_a_gate_of_more_adds_its_own(tmp_path):
    cache = EpisodeCache(tmp_path, "k1", TASKS)
    cache.store(D5, episodes("candidate", n=4))                       # t0, t1 x samples 0, 1
    one = cache.load(D5, "champion", 1)
    assert [(e.task_id, e.sample) for e in one] == [("t0", 0), ("t1", 0)] and cache.covers(D5, 1)
    assert cache.load(D5, "champion", 3) is None and not cache.covers(D5, 3), "sample 2 was never run"
    third = [Episode(task_id=t, sample=2, arm="candidate", resolved=True) for t in TASKS]
    first_again = [Episode(task_id="t0", sample=0, arm="candidate", resolved=True)]
    cache.store(D5, third + first_again)
    back = cache.load(D5, "champion", 3)
    assert [(e.task_id, e.sample) for e in back] == [(t, k) for t in TASKS for k in range(3)]
    assert back[0].resolved == episodes("candidate")[0].resolved, "a stored (task, sample) stays as it was"
    assert EpisodeCache(tmp_path, "k1", [*TASKS, "t2"]).load(D5, "champion", 1) is None, "a task it never ran"


def test_episodes_with_an_infrastructure_failure_are_not_kept(tmp_path):
    cache = EpisodeCache(tmp_path, "k1", TASKS)
    assert cache.store(D5, episodes("candidate", infra=True)) is None and cache.store(D5, []) is None
    assert cache.load(D5, "champion", 2) is None


def test_the_key_changes_with_every_setting_that_decides_an_episode(tmp_path):
    s = ServingConfig()
    base = cache_key(tmp_path, 0, s)
    others = {cache_key(tmp_path / "other", 0, s), cache_key(tmp_path, 1, s),
              cache_key(tmp_path, 0, ServingConfig(temperature=0.7)),
              cache_key(tmp_path, 0, ServingConfig(max_tokens=64))}
    assert base not in others and len(others) == 4


def test_a_gate_on_part_of_the_suite_reads_that_part_of_a_whole_suite_file(tmp_path):
    whole = EpisodeCache(tmp_path, "k1", TASKS)
    whole.store(D5, episodes("candidate"))
    part = EpisodeCache(tmp_path, "k1", TASKS[:1]).load(D5, "champion", 2)
    assert part is not None and {(e.task_id, e.sample) for e in part} == {(TASKS[0], 0), (TASKS[0], 1)}


def test_the_key_changes_when_the_episode_record_gains_a_field(tmp_path, monkeypatch):
    import dataclasses

    import evals.episode_cache as ec

    base = cache_key(tmp_path, 0, ServingConfig())
    grown = dataclasses.make_dataclass("Episode", [("later_field", bool, False)], bases=(Episode,))
    monkeypatch.setattr(ec, "Episode", grown)
    assert cache_key(tmp_path, 0, ServingConfig()) != base, "old entries would read the field as default"


@pytest.mark.integration
def test_the_champion_is_reused_only_when_reuse_is_on(tmp_path):
    from evals.tasks.spec import Task

    class T:  # the tasks' ids are all the key reads of them
        def __init__(self, id_):
            self.id = id_

    tasks: list[Task] = [T("t0"), T("t1")]  # type: ignore[list-item]
    on = make_config(tmp_path / "state-a", "gate.tasks.reuse_episodes=true")
    cache, reused = reused_champion(on, tmp_path / "suite", tasks, 2, D5, lambda m: None)
    assert reused is None and cache.root == tmp_path / "suite" / ".episode-cache"
    cache.store(D5, episodes("candidate"))
    other_state = make_config(tmp_path / "state-b", "gate.tasks.reuse_episodes=true")
    cache2, reused = reused_champion(other_state, tmp_path / "suite", tasks, 2, D5, lambda m: None)
    assert cache2.key == cache.key and {e.arm for e in reused} == {"champion"} and len(reused) == 4
    assert reused_champion(on, tmp_path / "suite", tasks, 2, None, lambda m: None)[1] is None, "no digest"
    off = make_config(tmp_path)
    assert reused_champion(off, tmp_path / "suite", tasks, 2, D5, lambda m: None) == (None, None)
