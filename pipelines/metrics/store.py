"""The A/B results of every cycle, under `<state_dir>/ab/`: cheap to draw as history, enough to go on cumulatively.

    <state_dir>/ab/cycles/<cycle_id>/result.json     CycleMetrics.to_dict(): the table, SRM, breakdowns, monitors
    <state_dir>/ab/cycles/<cycle_id>/units.parquet   per-user sums (rates.py), what later cycles accumulate
    <state_dir>/ab/cycles/<cycle_id>/latency.parquet latency histogram per (arm, policy_version, bucket, bin)
    <state_dir>/ab/cycles/<cycle_id>/cumulative_units.parquet, cumulative_latency.parquet
                                                     the totals over this cycle and every one before it
                                                     (cumulative.py): the next cycle adds its own to them;
                                                     only the last two cycles keep them
    <state_dir>/ab/index.json                        {"cycles": {cycle_id: seq}}: the order, without reading
                                                     every result
    <state_dir>/ab/folded/                           retention (`prune_frames`, `ab.keep_cycle_frames`): the
                                                     totals over every cycle up to seq `through` (folded.json
                                                     names them), whose units.parquet and latency.parquet were
                                                     removed

A cycle's folder is written beside the old one and swapped in by renames, so a reader sees the old result or
the new one. Writing a cycle again replaces it and keeps its place (`seq`) in the order; a new cycle goes last.
Writing a new cycle drops the totals of the cycle two before it (only the newest and its previous are read: a
cycle measured again reads its previous one's). Writing a cycle that is not the last drops the totals kept by the
cycles after it (they summed its old rows). A cycle whose previous one keeps no totals rebuilds them from every
earlier cycle's per-user sums, once. A cycle folder the index does
not name (a store written before there was one, or a crash between the swap and the index) is found by listing
and its seq read from its result. `history(last=N)` is one small frame with a row per (cycle, metric) of the last
N cycles, read from their JSON files only.

Retention (`prune_frames(keep)`, after each orchestrated cycle): every cycle keeps its result.json (the dashboards'
history, for audit: tens of kB a cycle); the per-user sums and latency histogram of cycles before the newest
`keep` are added to the folded totals, then removed. Only a rebuild reads earlier cycles' frames, and it starts from
the folded totals, so any cycle that still keeps its frames can be measured again exactly; a cycle whose frames
were folded cannot (its old sums are inside the folded totals), and `check_measurable` says so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipelines.metrics.cumulative import Totals, rebuild
from pipelines.metrics.result import CycleMetrics

CYCLE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
TOTALS = ("cumulative_units.parquet", "cumulative_latency.parquet")
FRAMES = ("units.parquet", "latency.parquet")
FOLDED = "folded"


@dataclass(frozen=True)
class Folded:
    """The totals over every cycle with seq <= `through` (`count` cycles), whose frames retention removed."""

    totals: Totals
    through: int
    count: int
    definitions: int      # rates.DEFINITIONS of the folded cycles' sums


def frames_to_fold(meta: list[tuple[int, str]], keep: int) -> list[tuple[int, str]]:
    """Of the stored cycles `meta` ((seq, cycle id), oldest first), those whose frames go: all but the newest `keep`
    (0: none)."""
    return meta[:-keep] if 0 < keep < len(meta) else []


def check_cycle_id(cycle_id: str) -> str:
    if not CYCLE_ID.match(str(cycle_id)):
        raise ValueError(f"cycle id {cycle_id!r}: use letters, digits, '.', '_' or '-' (at most 128)")
    return str(cycle_id)


class MetricsStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    @classmethod
    def for_state_dir(cls, state_dir: str | Path) -> "MetricsStore":
        return cls(Path(state_dir) / "ab")

    def _dir(self, cycle_id: str) -> Path:
        return self.root / "cycles" / check_cycle_id(cycle_id)

    def _index(self) -> dict[str, int]:
        try:
            return {str(c): int(s) for c, s in json.loads((self.root / "index.json").read_text())["cycles"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}     # none yet, or damaged: every folder is read instead

    def _meta(self) -> list[tuple[int, str]]:
        """(seq, cycle_id) of every stored cycle, oldest first: the index's, plus any folder it does not name."""
        try:
            names = {e.name for e in os.scandir(self.root / "cycles") if e.is_dir() and not e.name.startswith(".")}
        except FileNotFoundError:
            return []
        index = self._index()
        out = [(s, c) for c, s in index.items() if c in names]
        for c in names - index.keys():
            try:
                seq = json.loads((self.root / "cycles" / c / "result.json").read_text()).get("seq")
            except (OSError, ValueError):
                continue  # a folder being swapped in right now, or damaged: not a stored cycle
            out.append((int(seq) if seq is not None else 0, c))
        return sorted(out)

    def _write_index(self, meta: list[tuple[int, str]]) -> None:
        tmp = self.root / f".index-{os.getpid()}.json"
        tmp.write_text(json.dumps({"cycles": {c: s for s, c in meta}}), encoding="utf-8")
        os.replace(tmp, self.root / "index.json")

    def cycles(self) -> list[str]:
        """Stored cycle ids, oldest first."""
        return [c for _, c in self._meta()]

    def seqs(self) -> dict[str, int]:
        """Stored cycle id -> its seq."""
        return {c: s for s, c in self._meta()}

    def seq_of(self, cycle_id: str) -> int:
        """The cycle's place: its stored seq, or one past the last for a new cycle."""
        meta = self._meta()
        for s, c in meta:
            if c == cycle_id:
                return s
        return (meta[-1][0] + 1) if meta else 1

    def prior(self, cycle_id: str) -> list[str]:
        """Cycles stored before `cycle_id` (all of them when it is new)."""
        seq = self.seq_of(cycle_id)
        return [c for s, c in self._meta() if s < seq and c != cycle_id]

    def exists(self, cycle_id: str) -> bool:
        return (self._dir(cycle_id) / "result.json").is_file()

    def read(self, cycle_id: str, frames: bool = False) -> CycleMetrics:
        d = self._dir(cycle_id)
        if not (d / "result.json").is_file():
            raise FileNotFoundError(f"no A/B result for cycle {cycle_id!r} under {self.root} "
                                    f"(stored: {', '.join(self.cycles()) or 'none'})")
        res = CycleMetrics.from_dict(json.loads((d / "result.json").read_text()))
        if frames:
            res.units, res.latency = self.units(cycle_id), self.latency(cycle_id)
        return res

    def latest(self) -> CycleMetrics | None:
        cycles = self.cycles()
        return self.read(cycles[-1]) if cycles else None

    def units(self, cycle_id: str) -> pl.DataFrame:
        return pl.read_parquet(self._dir(cycle_id) / "units.parquet")

    def latency(self, cycle_id: str) -> pl.DataFrame:
        return pl.read_parquet(self._dir(cycle_id) / "latency.parquet")

    def totals(self, cycle_id: str) -> Totals | None:
        """The totals over `cycle_id` and every cycle before it, or None when the cycle keeps none."""
        paths = [self._dir(cycle_id) / name for name in TOTALS]
        if not all(p.is_file() for p in paths):
            return None
        return Totals(*(pl.read_parquet(p) for p in paths))

    def folded(self) -> Folded | None:
        """The totals over the cycles whose frames `prune_frames` removed; None when it removed none."""
        d = self.root / FOLDED
        try:
            meta = json.loads((d / "folded.json").read_text())
        except FileNotFoundError:
            return None
        return Folded(Totals(pl.read_parquet(d / meta["units"]), pl.read_parquet(d / meta["latency"])),
                      int(meta["through"]), int(meta["count"]), int(meta["metric_definitions"]))

    def check_measurable(self, cycle_id: str) -> None:
        """ValueError when `cycle_id` is a stored cycle whose frames retention folded: its old per-user sums are in
        the folded totals, which a new result for it would count twice."""
        base = self.folded()
        seq = self.seqs().get(cycle_id)
        if base is not None and seq is not None and seq <= base.through:
            raise ValueError(f"cycle {cycle_id!r} can no longer be measured again: its per-user sums were folded into "
                             f"the running totals by retention (only the newest ab.keep_cycle_frames cycles keep "
                             f"theirs; {base.count} cycles folded, through seq {base.through})")

    def prune_frames(self, keep: int) -> list[str]:
        """Retention: add the per-user sums and latency histograms of the cycles before the newest `keep` to the
        folded totals, then remove their files (result.json and the newest two cycles' totals stay); the cycles
        whose files went. 0 keeps every cycle's. Crash-safe: the folded totals are swapped in whole before any file
        is removed, and cycles they already cover are only removed."""
        from pipelines.metrics.rates import DEFINITIONS

        old = frames_to_fold(self._meta(), keep)
        if not old:
            return []
        base = self.folded()
        through = base.through if base is not None else 0
        fold = [(s, c) for s, c in old if s > through]
        if fold:
            definitions = {self.read(c).settings.get("metric_definitions", 1) for _, c in fold}
            definitions |= {base.definitions} if base is not None else set()
            if definitions != {DEFINITIONS}:
                raise ValueError(f"A/B frames to fold were measured with metric definitions {sorted(definitions)}, "
                                 f"this code has {DEFINITIONS}: measure the stored cycles again first")
            totals = rebuild([(self.units(c), self.latency(c)) for _, c in fold],
                             base.totals if base is not None else None)
            self._write_folded(totals, fold[-1][0], (base.count if base is not None else 0) + len(fold), DEFINITIONS)
        gone = []
        for _, c in old:
            paths = [self._dir(c) / name for name in FRAMES]
            if any(p.exists() for p in paths):
                for p in paths:
                    p.unlink(missing_ok=True)
                gone.append(c)
        return gone

    def _write_folded(self, totals: Totals, through: int, count: int, definitions: int) -> None:
        """The folded totals' files under names of their own, then folded.json naming them replaced in one rename
        (the commit point), then the files it no longer names removed."""
        d = self.root / FOLDED
        d.mkdir(parents=True, exist_ok=True)
        names = [f"{kind}-{through}.parquet" for kind in ("units", "latency")]
        for frame, name in zip((totals.units, totals.latency), names):
            tmp = d / f".{name}.{os.getpid()}.tmp"
            frame.write_parquet(tmp, compression="zstd")
            os.replace(tmp, d / name)
        tmp = d / f".folded.json.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"through": through, "count": count, "metric_definitions": definitions, "units": names[0],
                       "latency": names[1]}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, d / "folded.json")
        for f in d.glob("*.parquet"):
            if f.name not in names:
                f.unlink(missing_ok=True)

    def write(self, cycle_id: str, result: CycleMetrics) -> Path:
        """Store `result` (with its frames) as cycle `cycle_id`; returns the cycle's folder."""
        if result.cycle_id != cycle_id:
            raise ValueError(f"result is for cycle {result.cycle_id!r}, not {cycle_id!r}")
        if result.units is None or result.latency is None:
            raise ValueError("the result has no unit stats / latency histogram (compute_cycle_metrics makes them)")
        final = self._dir(cycle_id)
        if result.seq is None:
            result.seq = self.seq_of(cycle_id)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{cycle_id}-", dir=final.parent))
        try:
            result.units.write_parquet(tmp / "units.parquet", compression="zstd")
            result.latency.write_parquet(tmp / "latency.parquet", compression="zstd")
            if result.totals is not None:
                for frame, name in zip((result.totals.units, result.totals.latency), TOTALS):
                    frame.write_parquet(tmp / name, compression="zstd")
            with open(tmp / "result.json", "w", encoding="utf-8") as fh:
                json.dump(result.to_dict(), fh, indent=2, allow_nan=False)
                fh.flush()
                os.fsync(fh.fileno())
            old = None
            if final.exists():
                old = final.parent / f".{cycle_id}-old-{os.getpid()}"
                os.replace(final, old)
            os.replace(tmp, final)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        meta = self._meta()
        stale = [c for s, c in meta if s > result.seq]      # their totals summed this cycle's old rows
        if not stale and len(meta) > 2:
            stale = [meta[-3][1]]   # the last two cycles keep theirs (the newest measured again reads its previous)
        for c in stale:
            for name in TOTALS:
                (self._dir(c) / name).unlink(missing_ok=True)
        self._write_index(meta)
        return final

    def history(self, last: int | None = None) -> pl.DataFrame:
        """One row per (cycle, metric) of the last `last` cycles (None: every one): seq, cycle_id, as_of, metric,
        control, treatment, relative, low, high, change, scale, cum_change, seq_low, seq_high, verdict,
        seq_verdict, srm_p_value, srm_flagged, treatment_versions."""
        rows = []
        cycles = self.cycles()
        for cycle_id in (cycles if last is None else cycles[-last:] if last > 0 else []):
            r = self.read(cycle_id)
            tv = ",".join(r.versions.get(r.treatment_arm, []))
            for m in r.metrics:
                rows.append({"seq": r.seq, "cycle_id": r.cycle_id, "as_of": r.as_of, "metric": m.metric,
                             "label": m.label, "unit": m.unit, "control": m.control, "treatment": m.treatment,
                             "relative": m.relative, "change": m.change, "scale": m.scale, "low": m.low,
                             "high": m.high, "cum_change": m.cum_change,
                             "seq_low": m.seq_low, "seq_high": m.seq_high, "verdict": m.verdict,
                             "seq_verdict": m.seq_verdict, "srm_p_value": r.srm.get("p_value"),
                             "srm_flagged": bool(r.srm.get("flagged", False)), "treatment_versions": tv})
        schema = {"seq": pl.Int64, "cycle_id": pl.String, "as_of": pl.String, "metric": pl.String,
                  "label": pl.String, "unit": pl.String, "control": pl.Float64, "treatment": pl.Float64,
                  "relative": pl.Float64, "low": pl.Float64, "high": pl.Float64, "cum_change": pl.Float64,
                  "change": pl.Float64, "scale": pl.String,
                  "seq_low": pl.Float64, "seq_high": pl.Float64, "verdict": pl.String, "seq_verdict": pl.String,
                  "srm_p_value": pl.Float64, "srm_flagged": pl.Boolean, "treatment_versions": pl.String}
        return pl.DataFrame(rows, schema=schema)
