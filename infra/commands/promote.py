"""`rtrl promote VERSION` and `rtrl rollback`: move alias `champion` (registry/promotion.py) and print one JSON line.

Exit codes: 0 done; 3 refused (the gate did not pass, the champion moved since the eval, nothing to roll back;
the reason is on stderr and in the JSON line); 2 bad arguments.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

EXIT_OK, EXIT_USAGE, EXIT_REFUSED = 0, 2, 3


def _run(action: str, do) -> int:
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


def promote(args, cfg) -> int:
    from registry.promotion import promote as do_promote

    registry, lock = _registry_and_lock(cfg)
    return _run("promote", lambda: do_promote(registry, args.version, lock, force=args.force,
                                              expect_champion=args.expect_champion))


def rollback(args, cfg) -> int:
    from registry.promotion import rollback as do_rollback

    registry, lock = _registry_and_lock(cfg)
    return _run("rollback", lambda: do_rollback(registry, lock))
