#!/usr/bin/env bash
# rtrl's tests, in three tiers (docs/testing.md):
#   ./infra/test.sh --fast   unit tests only: no processes, no services (about 3 minutes on 2 cores)
#   ./infra/test.sh          the default tier, the README's and CI's: unit + integration + the docs build,
#                            everything but the long end-to-end runs (`full`) (about 20 minutes on 2 cores)
#   ./infra/test.sh --full   everything, the long end-to-end runs included
# Further arguments go to pytest, e.g. ./infra/test.sh --fast tests/unit/trainer -x.
# pytest's exit 5 ("no tests collected") is a failure here, never a silent pass.
set -uo pipefail
cd "$(dirname "$0")/.."
tier=default
case "${1:-}" in
  --fast) tier=fast; shift ;;
  --full) tier=full; shift ;;
esac
case $tier in
  fast) marks=(-m "not integration and not slow and not full") ;;
  default) marks=(-m "not full") ;;
  full) marks=() ;;
esac
if [ $tier != fast ]; then
  echo "[test] docs: mkdocs build --strict" >&2
  NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -q -d "$(mktemp -d)" || { echo "[test] the docs build failed" >&2; exit 1; }
fi
echo "[test] tier: $tier" >&2
.venv/bin/python -m pytest --durations=20 "${marks[@]}" "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "[test] pytest collected no tests: failing" >&2; exit 1; fi
exit $rc
