"""Configuration of the embedded local stack (`[kafka]` and `[mlflow]` in rtrl.toml)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class KafkaConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bootstrap_servers: str = Field(default="", description="An existing Kafka cluster ('host:port,...'). When set, "
                                   "`rtrl up` starts no broker and only creates the topics there.")
    host: str = Field(default="127.0.0.1", description="Embedded broker bind address.")
    port: int = Field(default=19092, ge=1, le=65535, description="Embedded broker port.")
    storage_engine: Literal["memory", "s3"] = Field(
        default="memory", description="Where the embedded broker keeps its log: \"memory\" = inside the broker "
        "(fastest; lost when the broker stops); \"s3\" = a local S3-compatible object store process, so the log "
        "survives broker crashes and restarts (about 4x lower throughput here).")
    partitions: int = Field(default=3, ge=1, le=1024, description="Partitions per topic unless overridden.")
    topic_partitions: dict[str, int] = Field(default_factory=dict, description="Per-topic partition overrides.")
    startup_timeout_s: float = Field(default=30.0, gt=0, le=600, description="Health-check deadline at start.")

    def bootstrap(self) -> str:
        return self.bootstrap_servers or f"{self.host}:{self.port}"

    def partitions_for(self, topic: str) -> int:
        return self.topic_partitions.get(topic, self.partitions)


class MlflowConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tracking_uri: str = Field(default="", description="'' means SQLite at <state_dir>/mlflow.db.")
    artifact_root: str = Field(default="", description="'' means <state_dir>/mlflow-artifacts.")
    ui_host: str = Field(default="127.0.0.1", description="MLflow UI bind address; localhost by default.")
    ui_port: int = Field(default=15000, ge=1, le=65535)
    startup_timeout_s: float = Field(default=60.0, gt=0, le=600)
    registered_model: str = Field(default="rtrl-policy", min_length=1, max_length=128,
                                  description="Registered model whose versions are the policy checkpoints.")
