"""Retention of the loop's report folders and per-checkpoint caches (docs/operations.md), run after each cycle by the
orchestrator's housekeeping (infra/orchestrator/housekeeping.py). Each rule is a pure plan over a listing, then its
application:

    thin(reports, keep, protected)    which report folders lose their bulky files: all but the newest `keep`
    evict(entries, keep)              which cache files go: all but the `keep` most recently used

  * The gate's reports (<state_dir>/gate/v<candidate>-vs-v<champion>-<stamp>/, `gate.keep_reports`): the newest N
    keep every file; an older one keeps its report.json (decision, interval, counts: the dashboard's row) and loses
    episodes.jsonl, report.md and report.html (its org suite's too). The report of a candidate an alias points to
    keeps every file: `aliased()` is asked only when an older report is there to thin, and if it fails nothing is
    thinned (retried next cycle). The gate runs' copies in MLflow (experiment `gate.experiment`, artifacts
    `report/...`) are thinned by the same rule (`thin_gate_runs`).
  * The data-quality reports (<state_dir>/quality/<cycle id or stamp>/, `quality.keep_reports`): the same; the
    report of a cycle in flight keeps every file.
  * The per-checkpoint caches (`gate.keep_cached_versions`): the tasks suite's kept episodes
    (<suite>/.episode-cache/*.jsonl, per suite folder) and the users suite's unit sums
    (<state_dir>/gate/users/units/*.parquet), a file per checkpoint. A file is used when written or read (the gates
    touch what they reuse), and every gate reads its champion's and its anchor's, so those stay; an evicted
    checkpoint is measured again when a gate next needs it.

Newest is by the time of the report.json (what the dashboard sorts by); most recently used by the file's mtime.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

SUMMARY = "report.json"
GATE_REPORT = re.compile(r"^v(?P<candidate>.+?)-vs-v(?P<champion>.+)-(?P<stamp>\d{8}T\d{6}Z)$")


@dataclass(frozen=True)
class Report:
    name: str                 # the folder's name
    time: float               # when its report.json was written (POSIX seconds)
    thinned: bool = False     # holds nothing but report.json files already


def thin(reports: Iterable[Report], keep: int, protected: Collection[str] = ()) -> list[str]:
    """The report folders that keep only their report.json: all but the newest `keep` (0: none), less the
    `protected` names and those thinned already; sorted."""
    if keep <= 0:
        return []
    newest_first = sorted(reports, key=lambda r: (-r.time, r.name))
    return sorted(r.name for r in newest_first[keep:] if r.name not in protected and not r.thinned)


def evict(entries: Iterable[tuple[str, float]], keep: int) -> list[str]:
    """Of the cache files `entries` ((name, last used, POSIX seconds)), those beyond the `keep` most recently used
    (0: none); sorted."""
    if keep <= 0:
        return []
    newest_first = sorted(entries, key=lambda e: (-e[1], e[0]))
    return sorted(name for name, _ in newest_first[keep:])


def gate_candidate(name: str) -> str | None:
    """The candidate's version label of a gate report folder's name (`v3-vs-v2-20261101T050000Z` -> "3"), else None."""
    m = GATE_REPORT.match(name)
    return m.group("candidate") if m else None


def reports_in(root: Path) -> list[Report]:
    """The report folders directly under `root` (those with a report.json)."""
    out = []
    if not root.is_dir():
        return out
    for d in root.iterdir():
        summary = d / SUMMARY
        if d.is_dir() and summary.is_file():
            out.append(Report(d.name, summary.stat().st_mtime, not _bulky(d)))
    return out


def _bulky(folder: Path) -> list[Path]:
    return [f for f in folder.rglob("*") if f.is_file() and f.name != SUMMARY]


def strip(folder: Path) -> int:
    """Delete every file of `folder` but its report.json files (and the folders left empty); how many."""
    files = _bulky(folder)
    for f in files:
        f.unlink(missing_ok=True)
    for d in sorted((d for d in folder.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
        if not any(d.iterdir()):
            d.rmdir()
    return len(files)


def thin_gate_reports(state: Path, keep: int, aliased: Callable[[], set[str]]) -> list[str]:
    """Apply `thin` to the gate's reports under <state>/gate; the folders thinned."""
    root = state / "gate"
    reports = [r for r in reports_in(root) if gate_candidate(r.name) is not None]
    older = thin(reports, keep)
    if not older:
        return []
    held = aliased()
    gone = [name for name in older if gate_candidate(name) not in held]
    for name in gone:
        strip(root / name)
    return gone


def thin_quality_reports(state: Path, keep: int, in_flight: Callable[[set[str]], set[str]]) -> list[str]:
    """Apply `thin` to the data-quality reports under <state>/quality, those of cycles `in_flight` names kept
    whole; the folders thinned."""
    root = state / "quality"
    older = thin(reports_in(root), keep)
    held = in_flight(set(older)) if older else set()
    gone = [name for name in older if name not in held]
    for name in gone:
        strip(root / name)
    return gone


def evict_cache(folder: Path, pattern: str, keep: int) -> list[str]:
    """Apply `evict` to the files of `folder` matching `pattern` (temporary '.' files left alone); the names
    evicted."""
    if not folder.is_dir():
        return []
    files = {f.name: f for f in folder.glob(pattern) if f.is_file() and not f.name.startswith(".")}
    gone = evict(((name, f.stat().st_mtime) for name, f in files.items()), keep)
    for name in gone:
        files[name].unlink(missing_ok=True)
    return gone


def episode_cache_dirs(cfg) -> list[Path]:
    """Every suite folder's episode cache: the configured suite's, each generated suite's (the default held-out
    suite, the orgs' own) and each suite's under gate.tasks.org_suites_dir."""
    from evals.episode_cache import CACHE_DIR
    from evals.gate_run import suites_root

    g = cfg.gate.tasks
    suites: set[Path] = set()
    if g.suite_dir:
        suites.add(Path(g.suite_dir).expanduser().resolve())
    for parent in (suites_root(cfg), Path(g.org_suites_dir).expanduser().resolve() if g.org_suites_dir else None):
        if parent is not None and parent.is_dir():
            suites |= {d for d in parent.iterdir() if d.is_dir()}
    return sorted(d / CACHE_DIR for d in suites if (d / CACHE_DIR).is_dir())


def evict_gate_caches(cfg, keep: int) -> list[str]:
    """Apply `evict` to the users suite's unit sums and to each suite's kept episodes; what was evicted, as paths
    relative to the state dir where they lie under it."""
    out = [f"gate/users/units/{n}" for n in evict_cache(cfg.state_path / "gate" / "users" / "units", "*.parquet",
                                                        keep)]
    for d in episode_cache_dirs(cfg):
        out += [_shown(cfg.state_path, d / n) for n in evict_cache(d, "*.jsonl", keep)]
    return out


def _shown(state: Path, p: Path) -> str:
    try:
        return str(p.relative_to(state))
    except ValueError:
        return str(p)


def aliased_versions(cfg) -> set[str]:
    """The labels of the versions an alias of any lineage points to (`<v>`, `<v>@<org>`): the registry's aliases,
    one read per lineage."""
    from mlflow.exceptions import MlflowException

    from registry.client import Registry

    shared = Registry.from_config(cfg).shared()
    out: set[str] = set()
    for org in [None, *shared.orgs()]:
        r = shared if org is None else shared.for_org(org)
        try:
            aliases = r.client.get_registered_model(r.model).aliases or {}
        except MlflowException:      # no such registered model yet
            aliases = {}
        out |= {str(v) if org is None else f"{v}@{org}" for v in aliases.values()}
    return out


THINNED_TAG = "retention.report_thinned"


def thin_gate_runs(registry, experiment: str, keep: int, aliased: Callable[[], set[str]]) -> list[str]:
    """The same rule as `thin_gate_reports` for the gate runs' copies in MLflow (experiment `experiment`, their
    artifacts under `report/`): all but the newest `keep` runs lose every artifact but their report.json files,
    a run of a candidate an alias points to keeps all, and a thinned run is tagged `retention.report_thinned`
    (its params, metrics and tags stay). The run ids thinned."""
    if keep <= 0:
        return []
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    client = registry.client
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    runs, token = [], None
    while True:
        page = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=1000,
                                  page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            break
    older = [r for r in runs[keep:] if r.data.tags.get(THINNED_TAG) != "true"]
    if not older:
        return []
    held = aliased()
    done = []
    for run in older:
        if run.data.tags.get("candidate_version") in held:
            continue
        repo = get_artifact_repository(run.info.artifact_uri, tracking_uri=registry.tracking_uri)
        for path in _bulky_artifacts(repo, "report"):
            repo.delete_artifacts(path)
        client.set_tag(run.info.run_id, THINNED_TAG, "true")
        done.append(run.info.run_id)
    return done


def _bulky_artifacts(repo, path: str) -> list[str]:
    """Every artifact file under `path` but the report.json files."""
    out = []
    for f in repo.list_artifacts(path):
        if f.is_dir:
            out += _bulky_artifacts(repo, f.path)
        elif f.path.rsplit("/", 1)[-1] != SUMMARY:
            out.append(f.path)
    return out
