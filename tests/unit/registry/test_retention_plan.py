"""Which versions keep their checkpoint files (registry.retention.plan), from injected registry state: aliases, the
rollback chain of K, the anchor v0, org champions and their bases, what serving holds, cycles in flight, age, and
versions whose deletion began or ended."""

from __future__ import annotations

import pytest

from registry.client import DELETED_TAG, DELETING_TAG, MASTER_DELETED_TAG, MASTER_DELETING_TAG
from registry.retention import (DELETE, GONE, KEEP, TRIM, WAIT, Lineage, VersionRecord, loaded_now, plan,
                                rollback_chain, summarize)

HOUR = 3600.0
NOW = 1_000_000.0
OLD = NOW - 100 * HOUR


def v(version, created=OLD, **tags) -> VersionRecord:
    return VersionRecord(str(version), created, {k: str(x) for k, x in tags.items()})


def promoted(version, previous, created=OLD, **tags) -> VersionRecord:
    """A version promoted over `previous` (its promotion.previous_version tag, as registry.promotion writes it)."""
    return v(version, created, **{"promotion.previous_version": previous, "promotion.time": "t", **tags})


def shared(versions, **aliases) -> Lineage:
    return Lineage("policy", versions, aliases)


def actions(verdicts) -> dict[str, str]:
    return {x.label: x.action for x in verdicts}


def run(lineages, k=2, min_age_s=10 * HOUR, **kw):
    return plan(lineages if isinstance(lineages, list) else [lineages], keep_promoted=k, min_age_s=min_age_s,
                now_s=NOW, **kw)


def straight_line(n: int) -> list[VersionRecord]:
    """v1 the bootstrap, then v2..vn each promoted over the one before."""
    return [v(1, kind="bootstrap")] + [promoted(i, str(i - 1)) for i in range(2, n + 1)]


def test_the_champion_and_the_k_versions_its_rollbacks_restore_keep_their_files_and_older_ones_lose_them():
    lin = shared(straight_line(6), champion="6", previous="5")
    assert rollback_chain(lin, 2) == ["6", "5", "4"]
    got = actions(run(lin, k=2))
    assert got == {"1": KEEP, "2": DELETE, "3": DELETE, "4": KEEP, "5": KEEP, "6": KEEP}


def test_k_of_zero_keeps_only_the_champion_of_the_chain_but_alias_previous_still_holds_its_version():
    got = actions(run(shared(straight_line(5), champion="5", previous="4"), k=0))
    assert got == {"1": KEEP, "2": DELETE, "3": DELETE, "4": KEEP, "5": KEEP}


def test_the_chain_follows_alias_previous_after_a_rollback_not_the_rolled_back_version():
    # 5 was promoted over 4, then rolled back: champion 4, previous 3 (4's promotion.previous_version)
    lin = shared(straight_line(5), champion="4", previous="3")
    assert rollback_chain(lin, 2) == ["4", "3", "2"]
    got = actions(run(lin, k=2))
    assert got["5"] == DELETE and got["2"] == KEEP and got["3"] == KEEP


def test_without_alias_previous_the_chain_starts_at_the_champions_promotion_tag():
    assert rollback_chain(shared(straight_line(4), champion="4"), 2) == ["4", "3", "2"]


def test_a_chain_that_loops_stops_instead_of_spinning():
    lin = shared([promoted(2, "3"), promoted(3, "2")], champion="3")
    assert rollback_chain(lin, 10) == ["3", "2"]


def test_the_chain_ends_at_a_version_whose_files_are_gone_as_a_rollback_does():
    versions = straight_line(5)
    versions[2] = promoted(3, "2", **{DELETED_TAG: "t"})
    lin = shared(versions, champion="4")
    assert rollback_chain(lin, 5) == ["4"]
    assert not any(x.lost for x in run(lin, k=5))


def test_every_alias_keeps_its_version_whatever_the_chain():
    lin = shared(straight_line(6), champion="6", previous="5", control="2", canary="3")
    verdicts = {x.label: x for x in run(lin, k=1)}
    assert verdicts["2"].action == KEEP and "alias control" in verdicts["2"].reasons
    assert verdicts["3"].action == KEEP and "alias canary" in verdicts["3"].reasons
    assert verdicts["4"].action == DELETE


def test_the_anchor_v0_is_kept_even_without_an_alias():
    got = run(shared([v(1, kind="base_checkpoint"), v(2, kind="bootstrap"), v(3)], champion="3"), k=1)
    assert {x.label: (x.action, x.reasons) for x in got} == {
        "1": (KEEP, ("anchor v0",)), "2": (KEEP, ("anchor v0",)),
        "3": (KEEP, ("alias champion",))}


def test_what_serving_holds_is_kept_shared_and_org_labels_alike():
    lins = [shared(straight_line(5), champion="5"), Lineage("policy.org-acme", [v(1), v(2)], {}, "acme")]
    got = actions(run(lins, k=0, held=["3", "1@acme"]))
    assert got["3"] == KEEP and got["1@acme"] == KEEP
    assert got["2"] == DELETE and got["2@acme"] == DELETE


def test_a_candidate_of_a_cycle_in_flight_is_kept_and_one_of_a_finished_cycle_is_not():
    lin = shared([v(1, kind="bootstrap"), v(2, cycle="c1", candidate="true"), v(3, cycle="c2", candidate="true")],
                 champion="1")
    got = run(lin, k=1, in_flight_cycles={"c2"})
    assert actions(got) == {"1": KEEP, "2": DELETE, "3": KEEP}
    assert got[2].reasons == ("cycle c2 in flight",)


def test_an_unheld_version_younger_than_min_age_waits_and_one_just_past_it_is_deleted():
    lin = shared([v(1, kind="bootstrap"), v(2, created=NOW - 2 * HOUR), v(3, created=NOW - 10 * HOUR)],
                 champion="1")
    got = run(lin, k=1, min_age_s=10 * HOUR)
    assert actions(got) == {"1": KEEP, "2": WAIT, "3": DELETE}
    assert "2.0 h" in got[1].reasons[0]
    assert actions(run(lin, k=1, min_age_s=0)) == {"1": KEEP, "2": DELETE, "3": DELETE}


def test_an_org_champion_keeps_its_base_and_its_own_rollback_chain():
    lins = [shared(straight_line(5), champion="5"),
            Lineage("policy.org-acme", [v(1, lora_base="2"), promoted(2, "1@acme", lora_base="3"),
                                        promoted(3, "2@acme", lora_base="4")],
                    {"champion": "3"}, "acme")]
    got = actions(run(lins, k=1))
    # acme: champion 3 (base 4) and its rollback 2 (base 3) keep files and bases; 1@acme and its base 2 go
    assert got == {"1": KEEP, "2": DELETE, "3": KEEP, "4": KEEP, "5": KEEP,
                   "1@acme": DELETE, "2@acme": KEEP, "3@acme": KEEP}


def test_an_org_lineages_alias_previous_names_its_own_version_not_the_shared_one():
    lin = Lineage("policy.org-acme", [promoted(1, "9"), promoted(2, "1@acme"), promoted(3, "2@acme")],
                  {"champion": "3", "previous": "2"}, "acme")
    assert rollback_chain(lin, 2) == ["3@acme", "2@acme", "1@acme"]


def test_an_org_chain_ends_at_the_shared_version_the_org_was_served_before_its_first_champion():
    lins = [shared(straight_line(4), champion="4"),
            Lineage("policy.org-acme", [promoted(1, "2", lora_base="3")], {"champion": "1"}, "acme")]
    assert rollback_chain(lins[1], 5) == ["1@acme", "2"]
    got = {x.label: x for x in run(lins, k=5)}
    assert got["2"].action == KEEP and "rollback 1/5 of acme" in got["2"].reasons
    assert got["3"].action == KEEP and "lora_base of 1@acme" in got["3"].reasons


def test_a_young_org_candidate_keeps_its_base_until_it_is_old_enough_to_go():
    lins = [shared(straight_line(4), champion="4"),
            Lineage("policy.org-acme", [v(1, created=NOW - HOUR, lora_base="2")], {}, "acme")]
    assert actions(run(lins, k=1))["2"] == KEEP
    assert actions(run(lins, k=1, min_age_s=0))["2"] == DELETE


def test_deleted_versions_are_gone_and_a_deletion_that_did_not_finish_is_planned_again():
    lin = shared([v(1, kind="bootstrap"), v(2, **{DELETED_TAG: "t1"}), v(3, **{DELETING_TAG: "t2"}),
                  v(4, created=NOW, **{DELETING_TAG: "t3"})], champion="1")
    got = {x.label: x for x in run(lin, k=1)}
    assert [got[k].action for k in "1234"] == [KEEP, GONE, DELETE, DELETE]   # a begun deletion ignores min age
    assert "did not finish" in got["3"].reasons[0]


def test_a_version_held_again_while_its_deletion_was_unfinished_is_kept_and_restored():
    lin = shared([v(1, kind="bootstrap"), v(2, **{DELETING_TAG: "t"})], champion="2")
    got = {x.label: x for x in run(lin, k=1)}
    assert got["2"].action == KEEP and got["2"].restore


def test_a_held_version_whose_files_are_gone_is_reported_lost():
    lin = shared([v(1, kind="bootstrap"), v(2, **{DELETED_TAG: "t"})], champion="2")
    got = run(lin, k=1)
    assert got[1].action == GONE and got[1].lost and "alias champion" in got[1].reasons[0]
    assert summarize(got)["lost"] == ["2"]


def test_summary_counts_actions_and_lists_the_versions_to_delete():
    lin = shared(straight_line(5) + [v(6, created=NOW)], champion="5")
    s = summarize(run(lin, k=1))
    assert (s["keep"], s["wait"], s["delete"], s["gone"]) == (3, 1, 2, 0) and s["to_delete"] == ["2", "3"]


def test_what_is_loaded_now_is_aliases_bases_serving_and_cycles_in_flight_not_the_chain():
    lins = [shared(straight_line(6) + [v(7, cycle="c9")], champion="6", previous="5"),
            Lineage("policy.org-acme", [v(1, lora_base="3"), v(2, lora_base="2")], {"champion": "1"}, "acme")]
    assert loaded_now(lins, held=["4"], in_flight_cycles={"c9"}) == {
        ("policy", "1"), ("policy", "3"), ("policy", "4"), ("policy", "5"), ("policy", "6"), ("policy", "7"),
        ("policy.org-acme", "1")}


def test_a_negative_keep_promoted_is_refused():
    with pytest.raises(ValueError, match="at least 0"):
        run(shared([v(1)], champion="1"), k=-1)


def shipped(version, served, parent="", created=OLD, **tags) -> VersionRecord:
    return v(version, created, **{"served.kind": served, "served.parent": parent, **tags})


CHAINS = [shipped(1, "anchor", kind="bootstrap"), shipped(2, "delta", "1"), shipped(3, "delta", "2"),
          shipped(4, "anchor"), shipped(5, "delta", "4"), shipped(6, "delta", "5"),
          shipped(7, "delta", "6", created=NOW - HOUR)]          # a new candidate: waits, and holds 6, 5 and 4


def test_a_version_only_a_delta_chain_holds_keeps_its_served_weights_and_loses_its_master():
    got = run(shared(CHAINS, champion="3"), k=0)
    assert actions(got) == {"1": KEEP, "2": TRIM, "3": KEEP, "4": TRIM, "5": TRIM, "6": TRIM, "7": WAIT}
    reasons = {x.label: x.reasons for x in got}
    assert reasons["2"][0] == "delta chain of v3" and reasons["4"][0] == "delta chain of v7"
    assert "float32 master goes" in reasons["2"][-1]
    assert summarize(got)["to_trim"] == ["2", "4", "5", "6"] and summarize(got)["trim"] == 4
    later = run(shared(CHAINS[:6], champion="3"), k=0)               # without v7 nothing holds 4..6
    assert actions(later) == {"1": KEEP, "2": TRIM, "3": KEEP, "4": DELETE, "5": DELETE, "6": DELETE}


def test_a_chain_link_that_anything_else_holds_or_that_is_young_keeps_its_master():
    got = run(shared(CHAINS, champion="3", previous="2", control="5"), k=1)
    assert actions(got)["2"] == KEEP and actions(got)["5"] == KEEP           # rollback 1 and alias previous; control
    young = [shipped(1, "anchor", kind="bootstrap"), shipped(2, "delta", "1", created=NOW - HOUR),
             shipped(3, "delta", "2", created=NOW - HOUR)]
    assert actions(run(shared(young, champion="3"), k=0))["2"] == KEEP       # may still be rolled back to or gated


def test_a_trimmed_link_stays_while_its_chain_holds_it_then_goes_and_an_unfinished_trim_is_planned_again():
    trimmed = [shipped(1, "anchor", kind="bootstrap"), shipped(2, "delta", "1", **{MASTER_DELETED_TAG: "t"}),
               shipped(3, "delta", "2")]
    got = run(shared(trimmed, champion="3"), k=0)
    assert actions(got)["2"] == KEEP and "master deleted at t" in got[1].reasons[-1]
    assert actions(run(shared(trimmed[:2], champion="1"), k=0))["2"] == DELETE
    begun = [shipped(1, "anchor", kind="bootstrap"), shipped(2, "delta", "1", **{MASTER_DELETING_TAG: "t"}),
             shipped(3, "delta", "2")]
    assert actions(run(shared(begun, champion="3", control="2"), k=0))["2"] == TRIM   # held, its master unusable
    restored = [shipped(1, "anchor", kind="bootstrap"), shipped(2, "delta", "1", **{DELETING_TAG: "t"}),
                shipped(3, "delta", "2")]
    (_, two, _) = run(shared(restored, champion="3"), k=0)
    assert (two.action, two.restore) == (TRIM, True)     # its whole deletion is undone: the chain needs it


def test_a_rollback_chain_ends_at_a_version_without_its_master_and_the_cache_keeps_chain_links():
    lin = shared([v(1, kind="bootstrap"), promoted(2, "1", **{MASTER_DELETED_TAG: "t"}), promoted(3, "2")],
                 champion="3")
    assert rollback_chain(lin, 5) == ["3"]
    assert ("policy", "2") in loaded_now([shared(CHAINS, champion="3")])
