#!/usr/bin/env bash
# Run the whole test suite (unit + integration against a real broker started by fixtures).
# Extra arguments go to pytest, e.g. ./infra/test.sh -m "not integration".
# pytest's exit 5 ("no tests collected") is a failure here, never a silent pass.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest --durations=30 "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "[test] pytest collected no tests: failing" >&2; exit 1; fi
exit $rc
