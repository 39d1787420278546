"""The Dagster instance of a state dir: `<state_dir>/dagster` keeps runs, sensor ticks and lineage."""

from __future__ import annotations

from pathlib import Path

SETTINGS = "telemetry:\n  enabled: false\n"   # nothing leaves the machine (and no welcome banner on stdout)


def dagster_home(state_path: Path) -> Path:
    """The instance folder, made with its dagster.yaml on first use (a user's own dagster.yaml is kept)."""
    home = Path(state_path) / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    settings = home / "dagster.yaml"
    if not settings.exists() or not settings.read_text().strip():
        settings.write_text(SETTINGS)
    return home
