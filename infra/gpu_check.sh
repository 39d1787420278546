#!/usr/bin/env bash
# The GPU check (`rtrl bench gpu --json`, infra/bench/gpu.py) on a GPU machine that has only CUDA torch,
# transformers, peft and triton (vLLM optional), from a copy of the repository: no venv, rtrl's other dependencies
# and no downloads needed. Prints one JSON object on stdout (progress on stderr); with $OUT set it also writes it
# to $OUT/bench_gpu.json. Finishes within about 6 minutes on one H200.
#   ./infra/gpu_check.sh                  the 0.5B-shaped check on the GPU (a toy dry run on the CPU without one)
#   ./infra/gpu_check.sh --size toy       any option of `python -m infra.bench.gpu --help`
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch, transformers' 2>/dev/null; then
  echo "[gpu-check] ERROR: $PY lacks torch or transformers (set PYTHON=/path/to/python)" >&2
  exit 2
fi
"$PY" - <<'PY' >&2
import importlib.util as u, torch
have = {m: bool(u.find_spec(m)) for m in ("peft", "triton", "vllm")}
print(f"[gpu-check] torch {torch.__version__}, cuda {torch.cuda.is_available()}"
      f"{' (' + torch.cuda.get_device_name(0) + ')' if torch.cuda.is_available() else ''}, "
      + ", ".join(f"{m} {'yes' if ok else 'no'}" for m, ok in have.items()))
PY
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
result=$("$PY" -m infra.bench.gpu --json "$@") || status=$?
printf '%s\n' "$result"
if [ -n "${OUT:-}" ] && [ -n "$result" ]; then printf '%s\n' "$result" > "$OUT/bench_gpu.json"; fi
exit "$status"
