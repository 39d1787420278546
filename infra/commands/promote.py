"""`rtrl promote VERSION` and `rtrl rollback`: move alias `champion` (registry/promotion.py) and print one JSON line.

Exit codes: 0 done; 3 refused (the gate did not pass, the champion moved since the eval, nothing to roll back;
the reason is on stderr and in the JSON line); 2 bad arguments.
"""

from __future__ import annotations

import json
import sys

from infra.commands import add_command

EXIT_OK, EXIT_USAGE, EXIT_REFUSED = 0, 2, 3


def add_parser(subparsers) -> None:
    prm = add_command(subparsers, "promote", promote, "make VERSION the champion if its gate passed against the "
                      "version alias champion still points to",
                      epilog="Compare-and-swap under a lock: refused (exit 3) when the version's gate tags do not "
                             "say promote or when champion moved since the eval. The old champion becomes alias "
                             "previous; audit tags promotion.* go on the version. Prints one JSON line.")
    prm.add_argument("version", help="registered model version, e.g. 3; an org's specialized version as "
                     "VERSION@ORG (moves ORG's champion, champion@ORG)")
    prm.add_argument("--force", action="store_true", help="skip the gate-decision check (recorded in "
                     "promotion.forced); the compare-and-swap on champion still applies")
    prm.add_argument("--expect-champion", metavar="VERSION", help="the champion to swap from when the version has "
                     "no gate result (with --force); must agree with gate.champion_version when that exists")
    rb = add_command(subparsers, "rollback", rollback,
                     "point champion back at alias previous (audited); previous moves one promotion further back",
                     epilog="Refused (exit 3) when previous is not set. Prints one JSON line.")
    rb.add_argument("--org", metavar="ORG", help="roll back ORG's specialized champion (champion@ORG) instead")


def _run(action: str, do) -> int:
    from dataclasses import asdict

    from registry.promotion import PromotionRefused

    try:
        result = do()
    except PromotionRefused as e:
        print(f"rtrl {action}: refused: {e}", file=sys.stderr)
        print(json.dumps({action: {"ok": False, "refused": str(e)}}))
        return EXIT_REFUSED
    print(json.dumps({action: {"ok": True, **asdict(result)}}))
    return EXIT_OK


def _registry_and_lock(cfg):
    from registry.promotion import lock_path_for
    from registry.client import Registry

    return Registry.from_config(cfg), lock_path_for(cfg.mlflow_tracking_uri(), cfg.state_path)


def _lineage(registry, org: str | None):
    """The registry of `org`'s lineage (None: the shared one); None after printing why when `org` is not valid."""
    if org is None:
        return registry
    try:
        return registry.for_org(org)
    except ValueError as e:
        print(f"rtrl: {e}", file=sys.stderr)
        return None


def promote(args, cfg) -> int:
    from registry.client import parse_label
    from registry.promotion import promote as do_promote

    registry, lock = _registry_and_lock(cfg)
    version, org = parse_label(args.version)
    if (registry := _lineage(registry, org)) is None:
        return EXIT_USAGE
    return _run("promote", lambda: do_promote(registry, version, lock, force=args.force,
                                              expect_champion=args.expect_champion))


def rollback(args, cfg) -> int:
    from registry.promotion import rollback as do_rollback

    registry, lock = _registry_and_lock(cfg)
    if (registry := _lineage(registry, args.org)) is None:
        return EXIT_USAGE
    return _run("rollback", lambda: do_rollback(registry, lock))
