"""`[retention]`: which registered versions keep their checkpoint files, and how many bytes a host's checkpoint
cache may hold (registry/retention.py, registry/cache.py, docs/operations.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RetentionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="Run retention at the end of every cycle's deploy step (`rtrl "
                          "retention` runs it by hand either way). Off: no artifact is ever deleted and the "
                          "checkpoint cache grows with every version loaded.")
    keep_promoted: int = Field(default=5, ge=0, le=1000,
                               description="The rollback chain kept: this many rollbacks of the champion stay "
                               "possible (the versions they would restore: alias previous, then each one's "
                               "promotion.previous_version; per lineage, the shared model's and each org's). "
                               "Versions an alias points to, the anchor v0, versions serving holds and candidates "
                               "of cycles in flight are kept besides.")
    min_age_s: float = Field(default=36000.0, ge=0, le=365 * 86400,
                             description="A version nothing holds loses its checkpoint files only once it was "
                             "registered this long ago (wall seconds; default two five-hour cycles). Its model "
                             "version, tags, metrics and gate reports stay in MLflow.")
    cache_max_bytes: int = Field(default=10 * 2**30, ge=0, le=2**50,
                                 description="Bound of this host's checkpoint cache (<state_dir>/checkpoints): "
                                 "cached copies of deleted versions go, then the least recently downloaded "
                                 "versions no alias, stage or cycle in flight holds, until it fits. Held versions "
                                 "stay even past the bound.")
