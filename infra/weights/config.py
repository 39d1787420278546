"""`[weights]`: each registered version's served weights, in the serving precision, stored whole (an anchor) or as
a verified delta against its parent's (registry/shipping.py, docs/operations.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# serving.dtype -> the served weights' precision ("auto": vLLM serves a checkpoint's own dtype, float32 here)
PRECISION_OF_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "auto": "fp32"}


class WeightsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ship: bool = Field(default=True, description="Store every registered version's served weights (`served/` "
                       "artifacts, tags served.*) and serve and gate from them. Off: serving and the gate load the "
                       "float32 master as before.")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        default="auto", description="The served weights' precision; auto = serving.dtype's (float32 on the CPU "
        "default, bf16 on the GPU profiles).")
    anchor_every: int = Field(default=8, ge=1, le=10_000, description="A lineage stores its served weights whole at "
                              "least every this many versions, so rebuilding one walks at most this many deltas.")
    max_delta_share: float = Field(default=0.5, gt=0, le=1, description="A version is stored whole, not as a "
                                   "delta, when its delta would exceed this share of the whole served weights.")
    shard_bytes: int = Field(default=2**30, ge=2**20, le=2**40, description="Safetensors shard size of whole "
                             "served weights (bytes).")

    def policy(self, serving_dtype: str):
        """The registry's ShipPolicy for engines of `serving_dtype`."""
        from registry.shipping import ShipPolicy

        precision = PRECISION_OF_DTYPE[serving_dtype] if self.precision == "auto" else self.precision
        return ShipPolicy(precision, self.anchor_every, self.max_delta_share, self.shard_bytes)
