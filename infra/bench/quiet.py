"""Library progress bars and chatter off in a benchmark's process (stdout is the JSON object's, stderr the
benchmark's own progress lines)."""

from __future__ import annotations

import os

QUIET_ENV = (("VLLM_LOGGING_LEVEL", "WARNING"), ("TRANSFORMERS_VERBOSITY", "error"),
             ("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false"),
             ("TQDM_DISABLE", "1"))


def quiet_libraries() -> None:
    """Set each variable of QUIET_ENV unless the caller set it (child processes inherit them)."""
    for var, value in QUIET_ENV:
        os.environ.setdefault(var, value)
