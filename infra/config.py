"""One TOML file configures every component; validated at start (pydantic), with dotted CLI overrides.

    rtrl --config my.toml --set kafka.port=29092 --set sdk.sampling.codebase_snapshot=0.5 up

Errors name the key and say why: `config error: kafka.port: Input should be less than or equal to 65535`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evals.gate.config import GateConfig
from infra.dashboard.config import DashboardConfig
from infra.orchestrator.config import DemoConfig, OrchestratorConfig
from infra.stack.config import KafkaConfig, MlflowConfig
from instrumentation.collector.config import CollectorConfig
from instrumentation.config import SdkConfig
from instrumentation.simulator.config import SimulatorConfig
from pipelines.archive.config import ArchiveConfig
from pipelines.metrics.config import AbConfig
from pipelines.quality.config import QualityConfig
from pipelines.rewards.spec import RewardSpec
from serving.config import ServingConfig
from trainer.bootstrap.config import PolicyConfig
from trainer.config import TrainerConfig

DEFAULT_CONFIG = Path(__file__).with_name("rtrl.toml")


class ConfigError(ValueError):
    pass


class RtrlConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state_dir: str = Field(default=".rtrl", description="Pids, logs, spool, SQLite and archive live under it.")
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig)
    sdk: SdkConfig = Field(default_factory=SdkConfig)
    collector: CollectorConfig = Field(default_factory=CollectorConfig)
    archive: ArchiveConfig = Field(default_factory=ArchiveConfig)
    rewards: RewardSpec = Field(default_factory=RewardSpec)
    quality: QualityConfig = Field(default_factory=QualityConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    serving: ServingConfig = Field(default_factory=ServingConfig)
    simulator: SimulatorConfig = Field(default_factory=SimulatorConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    ab: AbConfig = Field(default_factory=AbConfig)
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)
    orchestrator: OrchestratorConfig = Field(default_factory=OrchestratorConfig)
    demo: DemoConfig = Field(default_factory=DemoConfig)

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir).expanduser().resolve()

    def path_or_default(self, value: str, default: str) -> Path:
        """A configured path, or `default` under the state dir when the value is ''."""
        return Path(value).expanduser().resolve() if value else self.state_path / default

    def mlflow_tracking_uri(self) -> str:
        return self.mlflow.tracking_uri or f"sqlite:///{self.state_path / 'mlflow.db'}"


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word: take it as a string


def apply_override(data: dict, assignment: str) -> None:
    if "=" not in assignment:
        raise ConfigError(f"override {assignment!r} must look like key.sub=value")
    key, text = assignment.split("=", 1)
    parts = [p for p in key.strip().split(".")]
    if not all(parts):
        raise ConfigError(f"override key {key!r} is not a dotted name")
    node = data
    for p in parts[:-1]:
        child = node.setdefault(p, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{key}: {p!r} is a value, not a section")
        node = child
    node[parts[-1]] = _parse_value(text.strip())


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RtrlConfig:
    """Load and validate the TOML file (default: infra/rtrl.toml), then apply `key.sub=value` overrides."""
    p = Path(path) if path else DEFAULT_CONFIG
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from None
    for o in overrides:
        apply_override(data, o)
    try:
        return RtrlConfig.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors(include_url=False):
            key = ".".join(str(x) for x in err["loc"]) or "<root>"
            got = "" if err["type"] == "missing" else f" (got {err.get('input')!r})"
            reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            lines.append(f"{key}: {reason}{got}")
        raise ConfigError(f"{p}: " + "; ".join(lines)) from None
