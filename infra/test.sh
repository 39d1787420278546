#!/usr/bin/env bash
# rtrl's tests, in three tiers (docs/testing.md):
#   ./infra/test.sh --fast   unit tests only: no processes, no services (about 2 minutes on 2 cores)
#   ./infra/test.sh          the default tier, the README's and CI's: the docs build, then everything but the long
#                            end-to-end runs (`full`) (about 18 minutes on 2 cores)
#   ./infra/test.sh --full   everything, the long end-to-end runs included
# Two phases: first every test but the `exclusive` ones on every core (pytest-xdist, one test file per worker at a
# time, each worker with ports of its own; RTRL_TEST_WORKERS=N sets the count, 0 runs them in this process), then
# the `exclusive` ones (whole loops paced by wall-clock time, hot swaps under load) one at a time, each with the
# machine to itself.
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
  fast) parallel="not integration and not slow and not full"; alone="" ;;
  default) parallel="not full and not exclusive"; alone="exclusive and not full" ;;
  full) parallel="not full and not exclusive"; alone="exclusive or full" ;;
esac
if [ $tier != fast ]; then
  echo "[test] docs: mkdocs build --strict" >&2
  NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -q -d "$(mktemp -d)" || { echo "[test] the docs build failed" >&2; exit 1; }
fi
ran=0
phase() {  # one pytest run: a failure ends the script; exit 5 (nothing collected) is left to the end
  .venv/bin/python -m pytest --durations=20 "$@"
  local rc=$?
  if [ $rc -eq 0 ]; then ran=1; elif [ $rc -ne 5 ]; then exit $rc; fi
}
workers=${RTRL_TEST_WORKERS:-auto}
echo "[test] tier: $tier; all but the exclusive tests, on $workers workers" >&2
phase -n "$workers" --dist loadfile --no-loadscope-reorder -m "$parallel" "$@"
if [ -n "$alone" ]; then
  echo "[test] tier: $tier; the exclusive tests and the long runs, one at a time" >&2
  phase -m "$alone" "$@"
fi
if [ $ran -eq 0 ]; then echo "[test] pytest collected no tests: failing" >&2; exit 1; fi
exit 0
