"""One TOML file configures every component; validated at start (pydantic), with dotted CLI overrides.

    rtrl --config my.toml --set kafka.port=29092 --set sdk.sampling.codebase_snapshot=0.5 up

Errors name the key and say why: `config error: kafka.port: Input should be less than or equal to 65535`.

Configuration for a purpose is an overlay: a TOML file of the keys it changes (infra/configs/demo.toml: `rtrl demo`).
`overlay_overrides(overlay, config_path)` gives its keys in the `--set` form, less those the user's config file sets,
so that `load_config(config_path, [*overlay_overrides(...), *user_overrides])` layers
defaults < overlay < the user's config file < the user's --set. Values computed at run time are rendered with
`render_overrides({"dotted.key": value})`, which quotes them as TOML does.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evals.gate.config import GateConfig
from infra.dashboard.config import DashboardConfig
from infra.learning.config import LearningConfig
from infra.monitoring.config import MonitoringConfig
from infra.orchestrator.config import DemoConfig, OrchestratorConfig
from infra.retention.config import RetentionConfig
from infra.weights.config import WeightsConfig
from infra.stack.config import KafkaConfig, MlflowConfig
from instrumentation.collector.config import CollectorConfig
from instrumentation.config import SdkConfig
from instrumentation.simulator.config import SimulatorConfig
from pipelines.archive.config import ArchiveConfig
from pipelines.metrics.config import AbConfig
from pipelines.quality.config import QualityConfig
from pipelines.rewards.runner_config import BeamConfig
from pipelines.rewards.spec import RewardSpec
from serving.config import LORA_RANKS, ServingConfig
from trainer.bootstrap.config import PolicyConfig
from trainer.config import SpecializeConfig, TrainerConfig

DEFAULT_CONFIG = Path(__file__).with_name("rtrl.toml")
CONFIGS_DIR = Path(__file__).with_name("configs")      # overlays for a purpose (the demo's: demo.toml)


class ConfigError(ValueError):
    pass


class RtrlConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state_dir: str = Field(default=".rtrl", description="Pids, logs, spool, SQLite and archive live under it.")
    rewards_dir: str = Field(default="", description="The reward job's state (cycle manifests, carried join state, "
                             "dead letters) and the reward table (`table/`): a path or an object-store URL "
                             "(s3://bucket/prefix, schemas/storage.py); '' = <state_dir>/rewards.")
    # a section's description, or its class's docstring where it has one, heads its table in rtrl.toml
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig, description="The MLflow tracking store and model "
                                 "registry, whose versions are the policy checkpoints (docs/gate.md).")
    sdk: SdkConfig = Field(default_factory=SdkConfig, description="The telemetry SDK every client emits events "
                           "through: its queue, batching, on-disk spool and redaction (docs/ingest.md).")
    collector: CollectorConfig = Field(default_factory=CollectorConfig, description="The HTTP ingest collector "
                                       "(`rtrl collector`) and its side of the trust boundary: keys with an org and "
                                       "a role, rate limits, event-time bounds, TLS (docs/security.md).")
    archive: ArchiveConfig = Field(default_factory=ArchiveConfig, description="The archiver (`rtrl archive`): "
                                   "Kafka's events to the Parquet event log (docs/ingest.md).")
    rewards: RewardSpec = Field(default_factory=RewardSpec, description="The reward spec: every window, weight and "
                                "clip of the reward (docs/rewards.md; formulas in pipelines/rewards/spec.py).")
    beam: BeamConfig = Field(default_factory=BeamConfig, description="Beam pipeline options of the reward jobs: "
                             "`options`, then the job's own list, then what follows `--` on its command line; no "
                             "runner named = the DirectRunner (pipelines/rewards/runner_config.py, docs/rewards.md).")
    quality: QualityConfig = Field(default_factory=QualityConfig, description="Data-quality suites (`rtrl quality`); "
                                   "a failing suite blocks the cycle's training.")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="Checkpoint v0 (`rtrl bootstrap`): the "
                                 "default small Llama made here, or base_checkpoint (docs/policy.md).")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="The on-policy update of one cycle "
                                   "(`rtrl train`): data selection, loss, optimizer, memory (docs/trainer.md).")
    specialize: SpecializeConfig = Field(default_factory=SpecializeConfig)
    serving: ServingConfig = Field(default_factory=ServingConfig, description="The OpenAI-compatible gateway "
                                   "(`rtrl serve`): A/B arms, the vLLM engines behind them, hot swap, keys and TLS "
                                   "(docs/serving.md).")
    simulator: SimulatorConfig = Field(default_factory=SimulatorConfig, description="The simulated users of `rtrl "
                                       "simulate` (times in simulated seconds; docs/simulator.md).")
    gate: GateConfig = Field(default_factory=GateConfig, description="The evaluation gate (`rtrl gate`): promote "
                             "only if non-inferior and no guardrail trips (docs/gate.md).")
    ab: AbConfig = Field(default_factory=AbConfig)
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig, description="`rtrl dashboard` (Streamlit; "
                                       "docs/ab-dashboard.md).")
    orchestrator: OrchestratorConfig = Field(default_factory=OrchestratorConfig, description="The cycle under "
                                             "Dagster (`rtrl orchestrator`; times in the orchestrator's clock; "
                                             "docs/orchestrator.md).")
    demo: DemoConfig = Field(default_factory=DemoConfig)
    learning: LearningConfig = Field(default_factory=LearningConfig, description="`rtrl bench learning`: the loop "
                                     "for many cycles in one process (docs/learning.md).")
    retention: RetentionConfig = Field(default_factory=RetentionConfig, description="Registry retention, after each "
                                       "cycle's deploy and `rtrl retention`: which versions keep their checkpoint "
                                       "files; the bound of each host's checkpoint cache (docs/operations.md).")
    weights: WeightsConfig = Field(default_factory=WeightsConfig, description="Each registered version's served "
                                   "weights: their precision, and when they are stored whole or as a verified delta "
                                   "against the parent's (docs/operations.md).")
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig, description="Prometheus metrics, alerts "
                                         "and `rtrl status`: the cycle's exporter (`rtrl metrics`), the scrape "
                                         "configuration, the Prometheus asked for alerts (docs/monitoring.md).")

    # --- rules across sections: each names both keys and the fix ---------------------------------------------

    @model_validator(mode="after")
    def _one_completion_budget(self) -> "RtrlConfig":
        """Serving's completion budget is the trainer's constant length normalizer (Dr. GRPO): a response's tokens
        weigh the same whatever its length only when the two are equal (docs/profiles.md)."""
        if self.trainer.max_tokens != self.serving.max_tokens:
            raise ValueError(f"trainer.max_tokens ({self.trainer.max_tokens}) must equal serving.max_tokens "
                             f"({self.serving.max_tokens}): serving's completion budget is the trainer's length "
                             "normalizer (Dr. GRPO); set both to the same value")
        return self

    @model_validator(mode="after")
    def _serving_takes_the_adapters_trained(self) -> "RtrlConfig":
        """An adapter of a rank over serving.max_lora_rank is refused when serving or the gate loads it
        (serving/lora.py): the lineage's adapters (trainer.lora_r) and, when on, the orgs' (specialize.lora_r)."""
        ranks = {"trainer.lora_r": self.trainer.lora_r,
                 "specialize.lora_r": self.specialize.lora_r if self.specialize.enabled else 0}
        limit = self.serving.max_lora_rank
        for key, rank in ranks.items():
            if rank > limit:
                fit = next((r for r in LORA_RANKS if r >= rank), None)
                fix = f"set serving.max_lora_rank = {fit} or lower {key}" if fit else \
                    f"lower {key} to at most {LORA_RANKS[-1]} (the largest rank serving takes) and raise " \
                    "serving.max_lora_rank to it"
                raise ValueError(f"{key} ({rank}) is over serving.max_lora_rank ({limit}): serving would refuse "
                                 f"the adapters the trainer makes; {fix}")
        return self

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir).expanduser().resolve()

    def path_or_default(self, value: str, default: str) -> Path | str:
        """A configured location, or `default` under the state dir when the value is ''. A local path (or a
        `file://` URL) gives an absolute `Path`; an object-store URL (`s3://bucket/key`) stays a URL string
        (`schemas.storage.normalize`), never `Path("s3://b/k")`, which is the local folder `s3:/b/k`. Settings that
        only make sense locally (key files, sockets) get a URL string back and fail where they open it."""
        if not value:
            return self.state_path / default
        from schemas import storage  # pyarrow: loaded by the commands that read a location, not by every command

        loc = storage.normalize(value if storage.is_remote(value) or value.startswith("file:") else Path(value))
        return loc.expanduser().resolve() if isinstance(loc, Path) else loc

    def rewards_root(self) -> Path | str:
        """Where the reward job keeps its state and the reward table (`rewards_dir`)."""
        return self.path_or_default(self.rewards_dir, "rewards")

    def reward_table(self) -> Path | str:
        """The production reward table: `table/` under the rewards root."""
        from schemas import storage

        return storage.join(self.rewards_root(), "table")

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
    data = read_toml(p)
    for o in overrides:
        apply_override(data, o)
    try:
        return RtrlConfig.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors(include_url=False):
            key = ".".join(str(x) for x in err["loc"])
            # a section's or the whole config's own check names its keys; its input is the whole table
            got = "" if err["type"] == "missing" or isinstance(err.get("input"), Mapping) else \
                f" (got {err.get('input')!r})"
            reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
            lines.append(f"{key}: {reason}{got}" if key else f"{reason}{got}")
        raise ConfigError(f"{p}: " + "; ".join(lines)) from None


# --- overlays and rendered overrides ---------------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_value(value: Any) -> str:
    """`value` written as a TOML value (what follows `key = `): strings quoted and escaped, floats exact (repr),
    dates in ISO form, lists as arrays, mappings as inline tables. `tomllib` reads it back as the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, Path):
        return _toml_string(str(value))
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, Mapping):
        keys = (str(k) if _BARE_KEY.match(str(k)) else _toml_string(str(k)) for k in value)
        items = (f"{k} = {toml_value(v)}" for k, v in zip(keys, value.values()))
        return "{" + ", ".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__} {value!r}")


def _toml_string(text: str) -> str:
    # a TOML basic string: JSON's escapes are TOML's, except that TOML also forbids a raw DEL
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def render_overrides(values: Mapping[str, Any]) -> list[str]:
    """`{"trainer.lr": 3e-4, "serving.cpu_cores": "0"}` -> `["trainer.lr=0.0003", 'serving.cpu_cores="0"']`: each
    dotted key's value in the `--set` form, which `load_config` parses back to the same value."""
    return [f"{key}={toml_value(value)}" for key, value in values.items()]


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A parsed TOML document's values by dotted key (tables are walked; arrays are values)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def read_toml(path: str | Path) -> dict:
    p = Path(path)
    try:
        return tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from None


def overlay_overrides(overlay: str | Path, config_path: str | Path | None = None) -> list[str]:
    """The overlay file's keys as overrides, less those the user's config file (`config_path`) sets: put before the
    user's own overrides, they layer defaults < overlay < config file < overrides. With no config file (the
    default one, which only documents the defaults) every key of the overlay applies."""
    mine = flatten(read_toml(config_path)) if config_path else {}

    def set_by_user(key: str) -> bool:
        parts = key.split(".")
        return any(".".join(parts[:i]) in mine for i in range(1, len(parts) + 1))

    return render_overrides({k: v for k, v in flatten(read_toml(overlay)).items() if not set_by_user(k)})
