"""Specialization by organization (docs/trainer.md): an org's adapter lineage over the shared one, and the rule that an
org's rows train only its own adapter.

An org's lineage is the registered model `<model>.org-<org>` (registry.client.Registry.for_org). Each cycle, for an
org, `org_lookup` picks what its candidate trains from:

    org champion        its base (lora_base)         the candidate
    none                --                           a new adapter over the shared champion
    an adapter          the shared champion          that adapter, continued over the same base
    an adapter          an older shared version      a new adapter over the shared champion (the old one was
                                                     trained for other weights)

Rows served by the org champion (label `<version>@<org>`) are on-policy; rows the shared champion served to the
org's users are on-policy for a new adapter (LoRA starts at zero: the adapter's policy is its base's) and one
version stale for a continued one.

Isolation: `org_rows` keeps the org's rows before selection, and `check_isolation` refuses (IsolationError) a
selection that holds any other org's row, so no code path can train an org's adapter on another org's data.
"""

from __future__ import annotations

import polars as pl

from registry.client import LORA_BASE, is_adapter, parse_label, version_label


class IsolationError(RuntimeError):
    """Rows of another org reached an org's adapter training."""


def org_rows(rows: pl.DataFrame, org: str) -> pl.DataFrame:
    """The rows of `org` alone."""
    return rows.filter(pl.col("org_id") == org)


def check_isolation(rows: pl.DataFrame, org: str) -> None:
    others = rows.filter(pl.col("org_id") != org)
    if others.height:
        orgs = sorted(set(others["org_id"].to_list()))
        raise IsolationError(f"{others.height} row(s) of org(s) {', '.join(orgs)} in the training data of org "
                             f"{org}'s adapter (e.g. request {others['request_id'][0]}): refusing to train")


def org_ancestors(oreg, version: str, depth: int) -> list[str]:
    """Labels of the org champion's parents within the org's lineage (nearest first, at most `depth`), then the
    shared version its adapter is over."""
    org, out, current = oreg.org, [], version
    for _ in range(depth):
        parent, parent_org = parse_label(oreg.info(current).tags.get("parent", ""))
        if not parent or parent_org != org:
            break
        out.append(version_label(parent, org))
        current = parent
    return out


def org_lookup(registry, org: str, cycle: str, staleness: int, find_candidate, ancestors) -> tuple:
    """What rank 0 of an org's training shares (the shape of run_training's shared lookup): (existing candidate,
    parent label, parent folder, base version, base folder, usable older labels, the candidate's adapter tags).
    `find_candidate(registry, cycle)` and `ancestors(registry, version, depth)` are run.py's."""
    oreg = registry.for_org(org)
    existing = find_candidate(oreg, cycle)
    shared, shared_dir = registry.resolve("champion")
    if is_adapter(shared_dir):
        raise ValueError(f"the shared champion v{shared} is a LoRA adapter: org adapters need a full checkpoint "
                         "to be over (train the shared lineage with trainer.lora_r = 0)")
    tags = {"adapter": "true", LORA_BASE: shared, "lora_base_uri": f"models:/{registry.model}/{shared}",
            "lora_base_model": registry.model, "org": org}
    if existing is not None:
        return existing, "", "", None, None, [], tags
    champion = oreg.version_of("champion")
    if champion is not None and oreg.info(champion).tags.get(LORA_BASE) == shared:
        older = org_ancestors(oreg, champion, staleness) + [shared]
        return (None, version_label(champion, org), str(oreg.local_path(champion)), shared, str(shared_dir), older,
                tags)
    return None, shared, str(shared_dir), None, None, ancestors(registry, shared, staleness), tags
