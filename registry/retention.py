"""Which registered versions keep their checkpoint artifacts: a pure decision over the registry's state.

`plan(lineages, ...)` takes every lineage (the shared model and each org's, `Lineage`: its versions with their tags
and creation times, and its aliases), the labels serving holds (staged for a gate, served by an arm or an engine
still draining), the cycles still in flight, the rollback depth K and the minimum age, and returns one `Verdict`
per version:

    keep    something may still load it: an alias (champion, previous, control, ...), the rollback chain (the K
            versions the champion's successive rollbacks would restore: alias `previous`, then each version's
            `promotion.previous_version`), the anchor v0 (tag kind = bootstrap | base_checkpoint), a
            label serving holds, a candidate of a cycle in flight, the `lora_base` of an org version kept or
            waiting (an adapter loads over its base), or a version that a kept or waiting version's served
            weights are rebuilt through (its delta chain back to an anchor: registry/shipping.py)
    wait    nothing holds it, but it was registered less than `min_age_s` ago (a candidate that may be gated,
            promoted or rolled back to soon)
    trim    only the delta chain of a kept or waiting version holds it, it ships served weights and it is old
            enough: its served weights stay (the chain is rebuilt through them), its float32 master goes (a 7B
            master is 29 GB; only what may be promoted, rolled back to or trained from needs one). So does a
            version whose master deletion began (tag `retention.master_deleting`) and did not finish
    delete  nothing holds it and it is old enough: its artifacts go, its version, tags and metrics stay
    gone    its artifacts are deleted already (tag `retention.artifacts_deleted`)

A version whose deletion began (tag `retention.deleting`) and did not finish is planned `delete` again, unless
something holds it now: then `keep`, with `restore` set, so the caller removes the tag. A held version whose
artifacts are gone already is `gone` with `lost` set: the caller reports it (only an alias set by hand, outside
promotion and rollback, can point there).

Nothing here reads the clock, and only the two readers at the end (for reports: `versions_with_artifacts`,
`aliased_versions`) read the registry: `registry.retention_apply` gathers the inputs and applies the plan.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from registry.client import DELETED_TAG, DELETING_TAG, MASTER_DELETED_TAG, MASTER_DELETING_TAG, master_deleted, \
    parse_label
from registry.delta import DeltaMismatch
from registry.delta_chain import Stored, walk
from registry.shipping import KIND_TAG as SERVED_KIND_TAG, PARENT_TAG as SERVED_PARENT_TAG

REASON_TAG = "retention.reason"
ANCHOR_KINDS = frozenset({"bootstrap", "base_checkpoint"})   # tag `kind` of v0 (trainer/bootstrap)
KEEP, WAIT, TRIM, DELETE, GONE = "keep", "wait", "trim", "delete", "gone"
CHAIN_REASON = "delta chain of v"     # the start of a reason the delta chain of a version gives


@dataclass(frozen=True)
class VersionRecord:
    version: str
    created_s: float                      # when it was registered (epoch seconds)
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Lineage:
    model: str                            # the registered model
    versions: Sequence[VersionRecord]
    aliases: Mapping[str, str]            # alias -> version
    org: str | None = None                # None: the shared lineage; else the org whose specialized lineage it is


@dataclass(frozen=True)
class Verdict:
    model: str
    version: str
    action: str                           # keep | wait | trim | delete | gone
    reasons: tuple[str, ...]
    org: str | None = None
    restore: bool = False                 # keep, but a deletion had begun: remove its `retention.deleting` tag
    lost: bool = False                    # held, but its artifacts are gone already

    @property
    def label(self) -> str:
        """The policy version label (`<v>` shared, `<v>@<org>` an org's)."""
        return self.version if self.org is None else f"{self.version}@{self.org}"

    def as_dict(self) -> dict:
        return {"model": self.model, "version": self.label, "action": self.action, "reasons": list(self.reasons),
                **({"restore": True} if self.restore else {}), **({"lost": True} if self.lost else {})}


def rollback_chain(lineage: Lineage, keep_promoted: int) -> list[str]:
    """The labels the lineage's champion and its next `keep_promoted` rollbacks would serve: the champion, alias
    `previous` (else the champion's `promotion.previous_version`), then each one's
    `promotion.previous_version`. In an org lineage an entry is `<v>@<org>` for its own versions; a plain version
    is the shared model's (what the org was served before its first champion) and ends the chain. So does a
    version whose files or master retention deleted (or is deleting): a rollback removes alias `previous` there."""
    tags = {v.version: v.tags for v in lineage.versions}
    champion = lineage.aliases.get("champion")
    if champion is None:
        return []
    own = (lambda v: v) if lineage.org is None else (lambda v: f"{v}@{lineage.org}")
    chain, seen = [own(champion)], {champion}
    previous = lineage.aliases.get("previous")         # an alias names the lineage's own version; a tag, a label
    nxt = own(previous) if previous else tags.get(champion, {}).get("promotion.previous_version") or None
    while nxt and len(chain) <= keep_promoted:
        version, org = parse_label(nxt)
        if lineage.org is not None and org is None:       # the shared version the org was served before
            chain.append(version)
            break
        if org != lineage.org or version in seen or master_deleted(tags.get(version, {})):
            break       # another lineage, a loop, or files gone: a rollback stops there too (registry.promotion)
        chain.append(own(version))
        seen.add(version)
        nxt = tags.get(version, {}).get("promotion.previous_version") or None
    return chain


def delta_chain_holds(lineage: Lineage, live: Collection[str]) -> list[tuple[str, str]]:
    """(version, a version its served weights are rebuilt through) for each of `live` stored as a delta (tags
    `served.kind`, `served.parent`: registry/shipping.py), back to the anchor its chain starts from
    (`registry.delta_chain.walk`). A chain that breaks (a parent the lineage does not list, a loop) holds what it
    reached: the rebuild then fails loudly."""
    tags = {x.version: x.tags for x in lineage.versions}

    def lookup(version: str) -> Stored:
        if version not in tags:
            raise LookupError(version)
        t = tags[version]
        return Stored(version, t.get(SERVED_PARENT_TAG) or None, t.get(SERVED_KIND_TAG, ""))

    out: list[tuple[str, str]] = []
    for version in sorted(live, key=_version_key):
        try:
            out += [(version, rec.version) for rec in walk(version, lookup) if rec.version != version]
        except DeltaMismatch:
            pass
    return out


def plan(lineages: Iterable[Lineage], *, keep_promoted: int, min_age_s: float, now_s: float,
         held: Iterable[str] = (), in_flight_cycles: Collection[str] = frozenset()) -> list[Verdict]:
    """One verdict per version of every lineage (the module docstring says which). `held`: version labels serving
    holds; `in_flight_cycles`: ids of cycles not finished (their candidates carry tag `cycle`)."""
    if keep_promoted < 0:
        raise ValueError("keep_promoted must be at least 0 (the champion alone)")
    lineages = list(lineages)
    why: dict[tuple[str | None, str], list[str]] = {}   # (org, version) -> reasons to keep

    def hold(org: str | None, version: str, reason: str) -> None:
        why.setdefault((org, str(version)), []).append(reason)

    for label in held:
        version, org = parse_label(label)
        hold(org, version, "served or staged on serving")
    for lin in lineages:
        suffix = "" if lin.org is None else f"@{lin.org}"
        for alias, version in sorted(lin.aliases.items()):
            hold(lin.org, version, f"alias {alias}{suffix}")
        for i, label in enumerate(rollback_chain(lin, keep_promoted)[1:], 1):   # [0]: the champion, an alias
            version, org = parse_label(label)
            hold(org, version, f"rollback {i}/{keep_promoted}{' of ' + lin.org if lin.org else ''}")
        for v in lin.versions:
            if v.tags.get("kind") in ANCHOR_KINDS and lin.org is None:
                hold(None, v.version, "anchor v0")
            if (cycle := v.tags.get("cycle")) and cycle in in_flight_cycles:
                hold(lin.org, v.version, f"cycle {cycle} in flight")
    for lin in lineages:    # a version served by delta is rebuilt through its parents back to their anchor
        live = {ver for org, ver in why if org == lin.org}
        live |= {x.version for x in lin.versions if now_s - x.created_s < min_age_s and DELETED_TAG not in x.tags}
        for version, parent in delta_chain_holds(lin, live):
            hold(lin.org, parent, f"{CHAIN_REASON}{version}")

    out: list[Verdict] = []
    # org lineages first: a kept or waiting adapter holds its shared base
    for lin in sorted(lineages, key=lambda x: x.org is None):
        for v in sorted(lin.versions, key=lambda x: _version_key(x.version)):
            verdict = _verdict(lin, v, why.get((lin.org, v.version)), min_age_s, now_s)
            out.append(verdict)
            base = v.tags.get("lora_base")
            if lin.org is not None and base and verdict.action in (KEEP, WAIT):
                hold(None, base, f"lora_base of {verdict.label}")
    return out


def loaded_now(lineages: Iterable[Lineage], *, held: Iterable[str] = (),
               in_flight_cycles: Collection[str] = frozenset()) -> set[tuple[str, str]]:
    """(registered model, version) of what may be loaded now, what a host's checkpoint cache keeps whatever its
    size (registry.cache): every alias and the base of an aliased org version, the anchor, what serving holds, the
    candidates of cycles in flight; and a held version whose artifacts are gone (its cached copy is the last one).
    The rollback chain beyond the aliases is not among them (a rollback downloads its version again)."""
    verdicts = plan(lineages, keep_promoted=0, min_age_s=float("-inf"), now_s=0.0, held=held,   # none waits
                    in_flight_cycles=in_flight_cycles)
    return {(v.model, v.version) for v in verdicts if v.action in (KEEP, TRIM) or v.lost}


def _verdict(lin: Lineage, v: VersionRecord, reasons: list[str] | None, min_age_s: float,
             now_s: float) -> Verdict:
    mk = lambda action, rs, **kw: Verdict(lin.model, v.version, action, tuple(rs), lin.org, **kw)  # noqa: E731
    if DELETED_TAG in v.tags:
        if reasons:
            return mk(GONE, [f"artifacts deleted at {v.tags[DELETED_TAG]}, yet held: " + ", ".join(reasons)],
                      lost=True)
        return mk(GONE, [f"artifacts deleted at {v.tags[DELETED_TAG]}"])
    age = now_s - v.created_s
    if reasons and MASTER_DELETED_TAG in v.tags:
        return mk(KEEP, [*reasons, f"its float32 master deleted at {v.tags[MASTER_DELETED_TAG]}"])
    if reasons and (MASTER_DELETING_TAG in v.tags or (
            SERVED_KIND_TAG in v.tags and age >= min_age_s and all(r.startswith(CHAIN_REASON) for r in reasons))):
        return mk(TRIM, [*reasons, "only its served weights are needed: its float32 master goes"],
                  restore=DELETING_TAG in v.tags)
    if reasons:
        return mk(KEEP, reasons, restore=DELETING_TAG in v.tags)
    if DELETING_TAG in v.tags:
        return mk(DELETE, [f"deletion begun at {v.tags[DELETING_TAG]} did not finish"])
    if age < min_age_s:
        return mk(WAIT, [f"nothing holds it, registered {_hours(age)} ago (min_age_s {_hours(min_age_s)})"])
    return mk(DELETE, [f"no alias, rollback chain, anchor, stage or cycle in flight holds it; registered "
                       f"{_hours(age)} ago"])


def _hours(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 360 else f"{s:.0f} s"


def _version_key(version: str):
    return (0, int(version), "") if str(version).isdigit() else (1, 0, str(version))


def summarize(verdicts: Sequence[Verdict]) -> dict:
    """Counts by action, the labels planned for deletion and for losing their master alone (and any held version
    whose artifacts are lost)."""
    counts = {a: sum(v.action == a for v in verdicts) for a in (KEEP, WAIT, TRIM, DELETE, GONE)}
    return {**counts, "to_delete": [v.label for v in verdicts if v.action == DELETE],
            "to_trim": [v.label for v in verdicts if v.action == TRIM],
            "lost": [v.label for v in verdicts if v.lost]}


def versions_with_artifacts(registry) -> list[str]:
    """Labels of the versions, of every lineage, whose checkpoint files (the float32 master) are stored:
    retention has not deleted them, nor begun to (a version whose master alone went keeps only served weights)."""
    from registry.retention_apply import lineages_of

    return [Verdict(lin.model, v.version, KEEP, (), lin.org).label for lin in lineages_of(registry)
            for v in sorted(lin.versions, key=lambda x: _version_key(x.version)) if not master_deleted(v.tags)]


def aliased_versions(registry) -> set[str]:
    """Labels of the versions an alias of any lineage points to."""
    from registry.retention_apply import lineages_of

    return {v if lin.org is None else f"{v}@{lin.org}" for lin in lineages_of(registry) for v in lin.aliases.values()}
