"""The orchestrator's clock: wall time in production, an accelerated (simulated) clock in the demo and tests.

    clock = clock_for(cfg)            # orchestrator.clock: "wall" | "accelerated"
    clock.now()                       # an aware UTC datetime

The accelerated clock maps wall time to simulated time linearly: sim = origin + (wall - anchor) * speed. `rtrl
demo` writes it to `<state_dir>/orchestrator/clock.json` and starts the simulated users on the same mapping, so the
cadence ("five hours since the last cycle started") is measured in the event time the users stamp.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class WallClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)


@dataclass
class AcceleratedClock:
    origin: str                    # simulated time at `anchor` (ISO, UTC)
    anchor: float                  # wall time (epoch seconds) the origin corresponds to
    speed: float                   # simulated seconds per wall second
    wall: Callable[[], float] = time.time

    def now(self) -> datetime:
        return datetime.fromisoformat(self.origin) + timedelta(seconds=(self.wall() - self.anchor) * self.speed)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {k: v for k, v in asdict(self).items() if k != "wall"}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "AcceleratedClock":
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist: orchestrator.clock = \"accelerated\" needs the clock "
                                    "that `rtrl demo` writes (or use orchestrator.clock = \"wall\")")
        data = json.loads(path.read_text())
        return cls(data["origin"], float(data["anchor"]), float(data["speed"]))


@dataclass
class ManualClock:
    """Tests: time moves only when told."""

    t: datetime

    def now(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


def clock_path(state_path: Path) -> Path:
    return Path(state_path) / "orchestrator" / "clock.json"


def clock_for(cfg) -> Clock:
    if cfg.orchestrator.clock == "wall":
        return WallClock()
    return AcceleratedClock.load(clock_path(cfg.state_path))
