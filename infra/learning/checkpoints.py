"""What in-process serving loads for a registry version (`infra.offline_cycle.LocalPolicy` reads full Hugging Face
checkpoints): the version's own folder, or, for a LoRA adapter (an org's specialized version `<v>@<org>`), the
adapter merged into the full checkpoint it applies to (`trainer.adapters.merged`), made once under a cache folder.

    folder = servable(registry, "3@o1", work / "merged")

vLLM serves adapters as they are (serving/); merging gives the same function, computed in one matrix instead of two.
"""

from __future__ import annotations

from pathlib import Path


def servable(registry, label: str, cache: Path) -> Path:
    """A full checkpoint folder for version `label` of `registry` (the shared one: an org version by its label)."""
    from registry.client import is_adapter
    from trainer.adapters import base_of, merged

    folder = registry.local_path(label)
    if not is_adapter(folder):
        return Path(folder)
    out = Path(cache) / str(label).replace("@", "-at-")
    if not (out / "config.json").is_file():
        _, base = base_of(registry, label, folder)
        merged(folder, base, out)
    return out
