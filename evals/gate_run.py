"""One gate run: the suite, the flaky check, both arms through the real serving path, the decision, the report.

    run = run_gate(cfg, candidate="7")            # champion: the version alias `champion` points to now
    run.result.decision                            # "promote" | "keep_champion"

Steps (docs/gate.md):
  1. the suite: `gate.tasks.suite_dir`, or the generated held-out suite (`gate.tasks.suite_tasks` tasks,
     `gate.tasks.suite_seed`),
     made once under the state dir;
  2. the flaky-task check grades every task's snapshot and reference solution `gate.tasks.flaky_runs` times and
     quarantines tasks whose outcome changes (or that are mis-specified);
  3. each arm's version is served on a private endpoint (`evals.endpoints.serve_version`: vLLM, no telemetry)
     and runs every kept task K times (`gate.tasks.samples_per_task`) with the same seeds as the other arm; with
     `gate.tasks.via_serving` both versions are instead staged on the running gateway (`evals.endpoints.stage`) and
     the arms run at once on its engines (nothing to load for the champion; a promoted candidate stays staged,
     so serving switches to it without loading it again);
  4. `evals.gate.decide` → the report (JSON, Markdown, HTML) and episodes.jsonl in the run's folder → an MLflow
     run plus gate.* tags on the candidate version, which `rtrl promote` checks.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from evals.records import Episode
from evals.tasks.spec import Task, load_suite

COMPLETE = ".complete"


def default_suite_dir(cfg) -> Path:
    """Where the generated held-out suite of `cfg.gate` (suite_tasks, suite_seed) lives (`suites_root`)."""
    return suites_root(cfg) / f"default-n{cfg.gate.tasks.suite_tasks}-seed{cfg.gate.tasks.suite_seed}"


def suites_root(cfg) -> Path:
    """Where generated suites are made: gate.tasks.suites_root, else <state_dir>/eval-suites."""
    return Path(cfg.gate.tasks.suites_root).expanduser().resolve() if cfg.gate.tasks.suites_root else \
        cfg.state_path / "eval-suites"


def default_suite(cfg, log: Callable[[str], None] = lambda m: None) -> Path:
    """The generated held-out suite's folder (made on first use; a half-written one is made again)."""
    from evals.tasks.generate import generate_suite

    g = cfg.gate.tasks
    d = default_suite_dir(cfg)
    if not (d / COMPLETE).exists():
        log(f"[gate] generating the held-out suite: {g.suite_tasks} tasks (seed {g.suite_seed}) in {d}")
        generate_suite(d, g.suite_tasks, seed=g.suite_seed)
        (d / COMPLETE).write_text(datetime.now(timezone.utc).isoformat() + "\n")
    return d


def suite_of(cfg, suite: str | Path | None = None, log: Callable[[str], None] = lambda m: None) -> tuple[Path,
                                                                                                         list[Task]]:
    d = Path(suite).expanduser().resolve() if suite else (
        Path(cfg.gate.tasks.suite_dir).expanduser().resolve() if cfg.gate.tasks.suite_dir else default_suite(cfg, log))
    return d, load_suite(d)


FLAKY_CACHE = ".flaky-cache.json"


def quarantine(tasks: list[Task], runs: int, log: Callable[[str], None] = lambda m: None,
               cache_dir: Path | None = None) -> dict[str, str]:
    """{task id: reason} of the tasks the flaky check keeps out; with `cache_dir`, verdicts of unchanged tasks
    are read from its FLAKY_CACHE (gate.tasks.flaky_cache)."""
    from evals.tasks.flaky import check_flaky, check_flaky_cached

    t0 = time.monotonic()
    if cache_dir is not None:
        bad, graded = check_flaky_cached(tasks, runs, Path(cache_dir) / FLAKY_CACHE)
    else:
        bad, graded = check_flaky(tasks, runs=runs), len(tasks)
    cached = f" ({len(tasks) - graded} verdicts from {Path(cache_dir) / FLAKY_CACHE})" if graded < len(tasks) else ""
    log(f"[gate] flaky check: {graded} tasks graded {runs}x on snapshot and solution in "
        f"{time.monotonic() - t0:.1f}s{cached}; quarantined {len(bad)}" + "".join(f"\n  {k}: {v}"
                                                                                 for k, v in bad.items()))
    return bad


class Progress:
    """A progress line per arm on stderr: episodes done, resolved so far, infrastructure failures."""

    def __init__(self, arm: str, log: Callable[[str], None], every_s: float = 5.0):
        self.arm, self.log, self.every_s = arm, log, every_s
        self.t0 = self.last = time.monotonic()
        self.resolved = self.infra = 0

    def __call__(self, done: int, total: int, ep: Episode) -> None:
        self.resolved += int(ep.resolved)
        self.infra += int(ep.infra_error is not None)
        now = time.monotonic()
        if now - self.last >= self.every_s or done == total:
            self.last = now
            rate = done / max(now - self.t0, 1e-9)
            eta = (total - done) / rate if rate > 0 else float("inf")
            self.log(f"[gate] {self.arm}: {done}/{total} episodes, resolved {self.resolved / done:.2f}, "
                     f"infra failures {self.infra}, {rate:.2f} ep/s, eta {eta:.0f}s")


def arm_policy(url: str, model: str, **options):
    """The eval's client of one arm's endpoint; `options` (api_key, verify) for the running gateway
    (`evals.endpoints.serving_chat_options`), none for a private endpoint (plain, open, loopback)."""
    from codetasks.policy import OpenAIPolicy

    return OpenAIPolicy(url, model=model, timeout_s=300.0, max_retries=0, **options)


def _episodes(tasks: list[Task], url: str, model: str, arm: str, version: str, suite_dir: Path, samples: int,
              workers: int, seed: int, log: Callable[[str], None],
              options: dict | None = None) -> tuple[list[Episode], float]:
    from evals.harness import run_suite

    endpoint = arm_policy(url, model, **(options or {}))
    endpoint.check()
    t0 = time.monotonic()
    episodes = run_suite(tasks, endpoint, arm=arm, samples=samples, seed=seed, workers=workers,
                         suite_dirs=[suite_dir], progress=Progress(f"{arm} v{version}", log))
    return episodes, time.monotonic() - t0


def run_arm(cfg, registry, version: str, arm: str, tasks: list[Task], suite_dir: Path, samples: int,
            workers: int, log: Callable[[str], None]) -> tuple[list[Episode], float]:
    """Serve `version` privately and run the suite on it; (episodes, seconds spent running episodes)."""
    from evals.endpoints import serve_version

    t0 = time.monotonic()
    with serve_version(cfg, registry, version, arm=arm) as url:
        log(f"[gate] {arm}: version {version} served at {url} (loaded in {time.monotonic() - t0:.1f}s)")
        return _episodes(tasks, url, "", arm, version, suite_dir, samples, workers, cfg.gate.tasks.seed, log)


def run_arms(cfg, registry, versions: dict[str, str], tasks: list[Task], suite_dir: Path, samples: int,
             workers: int, timings: dict[str, float], log: Callable[[str], None]) -> list[Episode]:
    """Both arms, one after the other, each on its private endpoint."""
    episodes: list[Episode] = []
    for arm, version in versions.items():
        t1 = time.monotonic()
        eps, running = run_arm(cfg, registry, version, arm, tasks, suite_dir, samples, workers, log)
        episodes += eps
        timings[arm] = time.monotonic() - t1
        timings[f"{arm}_episodes"] = running
    return episodes


def run_arms_on_serving(cfg, versions: dict[str, str], tasks: list[Task], suite_dir: Path, samples: int,
                        workers: int, timings: dict[str, float], log: Callable[[str], None]) -> list[Episode]:
    """Both arms at once on the running gateway, each version staged there (the candidate's engine on
    gate.tasks.engine_cpu_cores, the champion's usually already serving the treatment arm)."""
    from concurrent.futures import ThreadPoolExecutor

    from evals.endpoints import serving_chat_options, stage, staged_model

    for arm, version in versions.items():
        t1 = time.monotonic()
        load_s = stage(cfg, version, cfg.gate.tasks.engine_cpu_cores if arm == "candidate" else "")
        timings[f"{arm}_stage"] = time.monotonic() - t1
        log(f"[gate] {arm}: version {version} staged on serving" + (f" (loaded in {load_s:.1f}s)" if load_s
                                                                     else " (already loaded)"))
    options = serving_chat_options(cfg)   # the admin key the gate staged with; serving's certificate under TLS
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(versions), thread_name_prefix="gate-arm") as pool:
        futures = {arm: pool.submit(_episodes, tasks, *staged_model(cfg, v), arm, v, suite_dir, samples, workers,
                                    cfg.gate.tasks.seed, log, options) for arm, v in versions.items()}
        episodes: list[Episode] = []
        for arm, fut in futures.items():
            eps, running = fut.result()
            episodes += eps
            timings[f"{arm}_episodes"] = running
    timings["arms"] = time.monotonic() - t0
    return episodes


def unstage_after(cfg, versions: dict[str, str], promote: bool, log: Callable[[str], None]) -> None:
    """Unstage what the gate staged; a candidate it promotes stays (serving switches to it when the alias moves)."""
    from evals.endpoints import EndpointError, unstage

    for arm, version in versions.items():
        if arm == "candidate" and promote:
            continue
        try:
            unstage(cfg, version)
        except EndpointError as e:   # serving restarted: nothing is staged any more
            log(f"[gate] unstaging version {version}: {e}")


def gate_tasks(cfg, suite: str | Path | None = None, max_tasks: int | None = None,
               log: Callable[[str], None] = lambda m: None) -> tuple[Path, list[Task], dict[str, str]]:
    """(the suite's folder, the tasks the flaky check keeps, {quarantined task id: reason})."""
    suite_dir, tasks = suite_of(cfg, suite, log)
    if max_tasks is not None:
        tasks = tasks[:max_tasks]
    bad = quarantine(tasks, cfg.gate.tasks.flaky_runs, log, suite_dir if cfg.gate.tasks.flaky_cache else None)
    return suite_dir, [t for t in tasks if t.id not in bad], bad


def _episode_cache(cfg, suite_dir: Path, tasks: list[Task]):
    from evals.episode_cache import EpisodeCache, cache_key, cache_root

    return EpisodeCache(cache_root(suite_dir), cache_key(suite_dir, cfg.gate.tasks.seed, cfg.serving),
                        [t.id for t in tasks])


def episode_cache_of(cfg, log: Callable[[str], None] = lambda m: None, suite: str | Path | None = None):
    """(the episode cache of `suite` (default: `cfg`'s gate suite) with `cfg`'s settings, the suite's folder, the
    tasks the flaky check keeps)."""
    suite_dir, kept, _ = gate_tasks(cfg, suite, None, log)
    return _episode_cache(cfg, suite_dir, kept), suite_dir, kept


def keep_episodes(cfg, version: str, registry=None, log: Callable[[str], None] | None = None,
                  suite: str | Path | None = None, samples: int | None = None) -> Path | None:
    """Run `version` alone on `suite` (default: the gate's suite; a private engine) with `samples` per task
    (default gate.tasks.samples_per_task) and keep its episodes in the episode cache, so that a later gate whose
    champion
    or anchor has the same bytes runs only the candidate (`rtrl demo --prepare` does it for v0); nothing runs when
    they are kept already. The cache file, or None: a version without a digest, or an infrastructure failure
    (nothing kept)."""
    from registry.client import Registry

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    registry = registry or Registry.from_config(cfg)
    digest = registry.digest(version)
    if digest is None:
        log(f"[gate] version {version} has no content digest (registered before versions carried one): not kept")
        return None
    cache, suite_dir, kept = episode_cache_of(cfg, log, suite)
    k = samples or cfg.gate.tasks.samples_per_task
    if cache.covers(digest, k):
        log(f"[gate] version {version}: episodes of the same checkpoint kept already ({cache.path(digest)})")
        return cache.path(digest)
    episodes, _ = run_arm(cfg, registry, version, "champion", kept, suite_dir, k, cfg.gate.tasks.workers, log)
    return cache.store(digest, episodes)


def reused_champion(cfg, suite_dir: Path, tasks: list[Task], samples: int, champion: str | None,
                    log: Callable[[str], None]):
    """(the episode cache or None when gate.tasks.reuse_episodes is off, the champion's kept episodes or None);
    `champion` is its content digest (None: a version without one, never reused)."""
    if not cfg.gate.tasks.reuse_episodes:
        return None, None
    cache = _episode_cache(cfg, suite_dir, tasks)
    reused = cache.load(champion, "champion", samples) if champion else None
    if reused:
        log(f"[gate] champion: {len(reused)} episodes of the same checkpoint kept from an earlier gate "
            f"({cache.path(champion)}); running the candidate only")
    return cache, reused


@dataclass
class GateRun:
    result: object                      # evals.gate.decision.GateResult
    candidate_version: str
    champion_version: str
    out_dir: Path
    report: dict[str, Path]
    run_id: str | None
    suite: Path
    tasks: int
    quarantined: dict[str, str]
    episodes: list[Episode]
    timings: dict[str, float] = field(default_factory=dict)
    samples: int = 0                    # per task and arm

    def summary(self) -> dict:
        r = self.result
        p = r.primary
        return {"decision": r.decision, "reasons": list(r.reasons), "candidate_version": self.candidate_version,
                "champion_version": self.champion_version,
                "resolved_candidate": p.candidate_rate if p else None,
                "resolved_champion": p.champion_rate if p else None,
                "difference": p.difference if p else None, "interval": r.interval_text(),
                "tasks": self.tasks, "samples_per_task": self.samples, "quarantined": len(self.quarantined),
                "episodes": len(self.episodes),
                "infra_failures": sum(e.infra_error is not None for e in self.episodes),
                "arms_run": sorted({e.arm for e in self.episodes if "reused_from" not in e.notes}),
                "report": str(self.report.get("html", "")), "mlflow_run_id": self.run_id,
                "seconds": {k: round(v, 1) for k, v in self.timings.items()}}


def run_gate(cfg, candidate: str, champion: str | None = None, *, suite: str | Path | None = None,
             max_tasks: int | None = None, samples: int | None = None, workers: int | None = None,
             out_dir: str | Path | None = None, track: bool = True, registry=None,
             log: Callable[[str], None] | None = None) -> GateRun:
    """Compare `candidate` with `champion` (default: the version alias champion points to) and record the result.
    LookupError when a version or the champion alias does not exist."""
    from evals.gate import decide, log_to_mlflow, write_report
    from registry.client import Registry

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    g = cfg.gate.tasks
    registry = registry or Registry.from_config(cfg)
    champion = champion or registry.version_of("champion")
    if champion is None:
        raise LookupError("alias champion is not set: run `rtrl bootstrap` or pass --champion VERSION")
    alias = cfg.gate.anchor_alias
    anchor = registry.version_of(alias) if alias else None
    digests = {}
    for arm, v in (("candidate", candidate), ("champion", champion), ("anchor", anchor)):  # unknown ones fail first
        if v is None:
            continue
        try:
            digests[arm] = registry.info(v).digest
        except Exception as e:  # noqa: BLE001 -- MlflowException: RESOURCE_DOES_NOT_EXIST
            raise LookupError(f"model version {v!r} is not registered: {e}") from None
    t0 = time.monotonic()
    suite_dir, kept, bad = gate_tasks(cfg, suite, max_tasks, log)
    timings = {"flaky_check": time.monotonic() - t0}
    k, w = samples or g.samples_per_task, workers or g.workers
    log(f"[gate] candidate v{candidate} vs champion v{champion}: {len(kept)} tasks x {k} samples per arm")
    cache, reused = reused_champion(cfg, suite_dir, kept, k, digests["champion"], log)
    versions = {"candidate": candidate} if reused else {"candidate": candidate, "champion": champion}
    # The anchor never changes within a lineage: its episodes are kept whether or not gate.tasks.reuse_episodes is on,
    # so that it runs once (or never, when it was the champion of an earlier gate).
    anchor_cache = None if anchor is None else (cache or _episode_cache(cfg, suite_dir, kept))
    anchor_eps = None            # the anchor's episodes when kept from an earlier gate
    if anchor is not None and anchor != champion:
        anchor_eps = anchor_cache.load(digests["anchor"], "anchor", k) if digests["anchor"] else None
        if anchor_eps is None:
            versions["anchor"] = anchor
        log(f"[gate] anchor ({alias}): version {anchor}" + (", episodes kept from an earlier gate"
                                                                      if anchor_eps else ", run as a third arm"))
    if g.via_serving:
        try:
            episodes = run_arms_on_serving(cfg, versions, kept, suite_dir, k, w, timings, log)
        except BaseException:
            unstage_after(cfg, versions, False, log)
            raise
    else:
        episodes = run_arms(cfg, registry, versions, kept, suite_dir, k, w, timings, log)
    for arm, version in versions.items():   # this gate's measurements, for later gates (reuse_episodes: every
        keep = cache if cache is not None else (anchor_cache if version == anchor else None)   # arm; else the anchor)
        if keep is not None and digests[arm]:
            keep.store(digests[arm], [e for e in episodes if e.arm == arm])
    episodes += reused or []
    if anchor is not None:       # the anchor arm: its own episodes, or the champion's when it is the champion
        episodes += anchor_eps or ([dataclasses.replace(e, arm="anchor", notes={**e.notes, "reused_from":
                                                                                  "this gate's champion arm"})
                                    for e in episodes if e.arm == "champion"] if anchor == champion else [])
    result = decide(episodes, g, anchor="anchor" if anchor is not None else None)
    if g.via_serving:
        unstage_after(cfg, versions, result.promote, log)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(out_dir) if out_dir else cfg.state_path / "gate" / f"v{candidate}-vs-v{champion}-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "episodes.jsonl", "w", encoding="utf-8") as f:
        for e in episodes:
            f.write(json.dumps(e.to_dict(), default=str) + "\n")
    meta = {"candidate_version": candidate, "champion_version": champion, "anchor_version": anchor,
            "suite": str(suite_dir),
            "tasks": len(kept), "samples_per_task": k, "quarantined": bad,
            "champion_episodes": reused[0].notes["reused_from"] if reused else "run by this gate"}
    report = write_report(result, episodes, out, meta)
    run_id = log_to_mlflow(result, out, registry, candidate, champion, experiment=cfg.gate.experiment) \
        if track else None
    timings["total"] = time.monotonic() - t0
    run = GateRun(result, candidate, champion, out, report, run_id, suite_dir, len(kept), bad, episodes, timings, k)
    log(f"[gate] {result.decision}: resolved {run.summary()['resolved_candidate']} vs "
        f"{run.summary()['resolved_champion']}, interval {result.interval_text()}; report {report['html']}")
    return run
