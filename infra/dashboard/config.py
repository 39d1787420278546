"""`[dashboard]`: where `rtrl dashboard` (Streamlit) listens and what it links to."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DashboardConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field(default="127.0.0.1", min_length=1,
                      description="Bind address; localhost by default (the dashboard has no authentication).")
    port: int = Field(default=18501, ge=1, le=65535, description="HTTP port of the dashboard.")
    mlflow_ui_url: str = Field(default="", description="Base URL of the MLflow UI for run links; '' = "
                                                       "http://{mlflow.ui_host}:{mlflow.ui_port} (`rtrl up --mlflow-ui`).")
    refresh_s: float = Field(default=30.0, ge=1, le=3600,
                             description="How long read files and registry answers are cached before a re-read.")
    max_cycles: int = Field(default=200, ge=1, le=100_000, description="The pages read the last this many cycles "
                            "(A/B results, reward-cycle manifests, gate reports): a render costs the same however "
                            "long the history. The sidebar's 'Load older cycles' reads as many again per press.")
