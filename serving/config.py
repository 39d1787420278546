"""`[serving]`: the OpenAI-compatible endpoint, its A/B arms and the vLLM engines behind them."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


CPU_CORES_PATTERN = r"^$|^(auto|nobind|[0-9,\-|]+)$"   # VLLM_CPU_OMP_THREADS_BIND values
DEVICES_PATTERN = r"^$|^[0-9]+(,[0-9]+)*$"                # CUDA_VISIBLE_DEVICES of one engine, e.g. "0" or "2,3"
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)        # vLLM's max_lora_rank values


def device_ids(devices: str) -> list[int]:
    """The device ids of an arm's `devices` ("" = none named)."""
    return [int(d) for d in devices.split(",")] if devices else []


class ArmConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, description="Arm name, logged with every request.")
    alias: str = Field(min_length=1, max_length=64, description="Registry alias of the model version it serves.")
    share: float = Field(ge=0, le=1, description="Fraction of users assigned to it (shares sum to 1).")
    per_org: bool = Field(default=False, description="The specialized arm: a request of org O is served by O's "
                          "specialized champion (`<alias>@O`, the alias of O's lineage; trainer --org) when O has "
                          "one, else by `alias`.")
    devices: str = Field(default="", pattern=DEVICES_PATTERN,
                         description="GPUs only: the devices of this arm's engine, e.g. \"0\" or \"2,3\" (its "
                                     "processes see CUDA_VISIBLE_DEVICES=devices); as many as "
                                     "serving.tensor_parallel_size. \"\" = vLLM's default (the first devices "
                                     "visible to serving). Arms on one alias share an engine, so their devices "
                                     "must match.")
    gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1, description="GPUs only: this arm's engine's share of each of its devices' memory "
        "(None = serving.gpu_memory_utilization). Engines that share a device need shares that sum to at most 1.")

    @model_validator(mode="after")
    def _devices_unique(self):
        ids = device_ids(self.devices)
        if len(set(ids)) != len(ids):
            raise ValueError(f"arm {self.name}: devices {self.devices!r} names a device twice")
        return self


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or "localhost"; anything else (0.0.0.0, ::, a name) may be reachable from other machines."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def _default_arms() -> list[ArmConfig]:
    return [ArmConfig(name="control", alias="control", share=0.5),
            ArmConfig(name="treatment", alias="champion", share=0.5)]


class ServingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field(default="127.0.0.1", description="Bind address; localhost by default.")
    port: int = Field(default=18300, ge=1, le=65535, description="The gateway's port (OpenAI-compatible /v1).")
    trusted_proxies: list[str] = Field(default_factory=list, description="Addresses (or CIDR ranges) of reverse "
                                       "proxies whose X-Forwarded-For / X-Forwarded-Proto name the client; [] = "
                                       "trust none: the client is the TCP peer, whatever the headers say.")
    experiment: str = Field(default="rtrl-ab-1", min_length=1, max_length=64,
                            description="Salt of the sticky user→arm hash; a new value reshuffles users.")
    arms: list[ArmConfig] = Field(default_factory=_default_arms, min_length=1, max_length=8,
                                  description="The A/B arms, each {name, alias, share, per_org, devices, "
                                              "gpu_memory_utilization}: names unique, shares summing to 1. By "
                                              "default control serves alias control (a frozen version) and "
                                              "treatment alias champion (the real-time RL lineage).")
    max_tokens: int = Field(default=192, ge=1, le=8192, description="Default completion budget per request.")
    temperature: float = Field(default=1.0, ge=0, le=2,
                               description="Training traffic samples the untruncated distribution at 1.0.")
    max_model_len: int = Field(default=1024, ge=64, le=131072, description="Context length of the engines: prompt "
                               "plus completion tokens.")
    kv_cache_gb: float = Field(default=1.0, gt=0, le=512, description="CPU-only: vLLM CPU KV-cache space per "
                               "engine. On GPUs gpu_memory_utilization governs the KV cache (what is left of the "
                               "engine's share after weights and activations).")
    tensor_parallel_size: int = Field(default=1, ge=1, le=64, description="GPUs: devices one engine shards its "
                                      "model over (vLLM tensor parallelism); an arm's `devices` names that many.")
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1, description="GPUs: the share of each device's "
                                          "memory an engine may use (weights, activations, then KV cache); an "
                                          "arm's own gpu_memory_utilization overrides it.")
    swap: Literal["auto", "blue_green", "in_place"] = Field(
        default="auto", description="How a hot swap to a checkpoint of the same architecture replaces the served "
        "weights: blue_green loads a second engine beside the old one; in_place lets the old engine drain and "
        "reloads its weights (one engine's memory; new requests wait for the reload). auto = in_place on GPUs, "
        "blue_green on CPU. Another architecture, or an engine another alias or a stage also holds, always "
        "swaps blue/green.")
    enable_lora: bool = Field(default=False, description="Start every engine with LoRA enabled. Engines that serve "
                              "adapters (serving/lora.py) enable it whatever this says; an adapter runs on its "
                              "base's own LoRA engine, not on an arm's engine of the base.")
    max_loras: int = Field(default=2, ge=1, le=64, description="Adapters one engine batches at once (a swap between "
                           "adapters of one base serves both while the old one drains).")
    max_lora_rank: int = Field(default=16, description=f"Largest adapter rank an engine accepts; one of {LORA_RANKS}.")
    cpu_cores: str = Field(default="", pattern=CPU_CORES_PATTERN,
                           description="CPU-only, opt-in (vLLM's CPU build): cores an engine's worker binds its "
                                       "threads to, e.g. \"0\" or \"0-7\" (VLLM_CPU_OMP_THREADS_BIND); \"\" = vLLM's "
                                       "own choice. Engines that share a core with each other or a trainer stall in "
                                       "OpenMP barriers. Leave \"\" on GPUs.")
    spare_engines: int = Field(default=0, ge=0, le=4,
                               description="CPU-only, opt-in: warm engines kept idle beside the arms' "
                                           "(serving/spares.py). A version staged or swapped in takes one and only "
                                           "reloads its weights in place instead of starting an engine; a retired "
                                           "engine becomes one. Each holds an engine's memory (kv_cache_gb) while "
                                           "idle. 0 = none; leave 0 on GPUs.")
    spare_cpu_cores: str = Field(default="", pattern=CPU_CORES_PATTERN,
                                 description="CPU-only: cpu_cores of the spare engines (\"\" = cpu_cores), e.g. the "
                                             "gate's (gate.tasks.engine_cpu_cores). A stage or swap asking for other "
                                             "cores moves a spare's workers there; one left to vLLM's choice (\"\") "
                                             "starts its own engine.")
    registry_poll_s: float = Field(default=2.0, gt=0, le=3600,
                                   description="How often aliases are checked for a new version (hot swap).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="float32", description="Weights/activations dtype of the engines. float32 keeps serving's logprobs "
        "equal to the trainer's (vLLM's 'auto' downcasts float32 checkpoints to bfloat16); use bfloat16 on GPUs.")
    enforce_eager: bool = Field(default=True, description="Skip torch.compile / CUDA graphs: an engine starts in "
                                "~25 s instead of ~30-50 s on CPU, so hot swaps finish sooner; false on GPUs.")
    busy_poll_ms: float = Field(
        default=0.0, ge=0, le=1000, description="How long an engine's processes busy-poll for the next step after "
        "one before they sleep until woken (serving/vllm_idle.py: applied in rtrl's own engine processes only). "
        "vLLM's own window is 1000 ms, which keeps a core spinning per engine under steady traffic; a few ms "
        "keeps batching as fast and lets idle engines sleep. 0 = vLLM's own behaviour.")
    max_num_seqs: int = Field(default=256, ge=1, le=4096, description="Sequences one engine batches at once.")
    seed: int = Field(default=0, ge=0, description="Engine seed; a request's own `seed` makes its sample repeatable.")
    drain_timeout_s: float = Field(default=300.0, gt=0, le=86400, description="After a hot swap the old engine "
                                   "finishes its in-flight requests for at most this long, then shuts down.")
    shutdown_grace_s: int = Field(default=30, ge=1, le=3600, description="A stopping gateway lets the requests "
                                  "in flight finish for at most this long, then cancels them and shuts its engines "
                                  "down.")
    stage_ttl_s: float = Field(default=3600.0, gt=0, le=7 * 86400,
                               description="A version staged for evaluation (POST /admin/stage) that no alias took "
                                           "is unstaged this long after staging, so a gate that died leaks no engine.")
    startup_timeout_s: float = Field(default=300.0, gt=0, le=3600,
                                     description="`rtrl serve --detach` waits this long for GET /health to be ready.")
    telemetry: bool = Field(default=True, description="Emit one trajectory event per request through the SDK "
                            "(Kafka; spooled on disk while the broker is down).")
    telemetry_write_ahead: bool = Field(default=True, description="Serving's SDK client writes each trajectory to "
                                        "its write-ahead log before the request is answered (sdk.write_ahead for "
                                        "this client), so a kill of serving loses no answered request's "
                                        "trajectory; false follows sdk.write_ahead.")
    access_log: bool = Field(default=False, description="Log one line per HTTP request (uvicorn's access log).")
    metrics: bool = Field(default=True, description="Serve GET /metrics: the gateway's request, latency and token "
                          "counters and each vLLM engine's own statistics (docs/monitoring.md). false: none is "
                          "kept and /metrics answers 404 (the baseline of `rtrl bench serving`'s cost of metrics).")
    api_keys_file: str = Field(default="", description="Hashed client keys (JSON, schemas.api_keys); '' = the "
                               "collector's (collector.api_keys_file, <state_dir>/collector_keys.json by default): "
                               "one file holds a deployment's keys, so a client's key works at both servers.")
    require_key: bool | None = Field(default=None, description="Whether /v1/* needs an API key (401 without one). "
                                     "None = auto: required unless `host` is a loopback address (127.0.0.0/8, ::1, "
                                     "localhost), since no server binds beyond loopback without auth; false is "
                                     "refused for such a host. /admin/* always needs a key with role admin.")
    user_header: str = Field(default="", pattern=r"^$|^[A-Za-z0-9-]{1,64}$",
                             description="A header that names the A/B user when a request's body has no `user`, "
                                         "e.g. \"x-rtrl-user\": for a trusted proxy in front of serving that "
                                         "knows its users. '' = the user is the key's client id. Any client "
                                         "that can reach serving can set it, so set it only behind such a proxy.")
    tls_cert_file: str = Field(default="", description="PEM certificate (chain) to terminate TLS with; '' = plain "
                               "HTTP. Needs tls_key_file. Keys travel in every request's headers: use TLS "
                               "whenever serving is reached over a network.")
    tls_key_file: str = Field(default="", description="PEM private key of tls_cert_file.")
    max_event_skew_future_s: float = Field(
        default=300, ge=1, le=86400, description="A request's metadata.event_time more than this after the receipt "
        "time is replaced by the receipt time and counted (GET /health requests.event_time_clamped): a client's "
        "clock must not move a cycle's cut-off.")
    max_event_skew_past_s: float = Field(
        default=7 * 86400, ge=60, le=3650 * 86400, description="A request's metadata.event_time more than this "
        "before the receipt time is replaced by the receipt time and counted. Raise it to replay old simulated "
        "time through a live gateway.")
    tool_format: Literal["auto", "hermes", "llama3_json", "mistral"] = Field(
        default="auto", description="How the served model writes tool calls (schemas/tool_formats.py): responses "
        "are parsed and the assistant calls a conversation sends back are written in it. \"auto\" = detected from "
        "each served checkpoint's chat template (Hermes <tool_call> when the template shows none); \"hermes\" "
        "(Qwen2.5, Hermes), \"llama3_json\" (Llama 3.1+), \"mistral\" ([TOOL_CALLS], Mistral v0.3).")

    @model_validator(mode="after")
    def _arms_are_a_split(self):
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names must be unique, got {names}")
        total = sum(a.share for a in self.arms)
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"arm shares must sum to 1, got {total}")
        return self

    @model_validator(mode="after")
    def _placement(self):
        """Per-arm devices: as many as tensor_parallel_size; one alias's arms on the same devices; engines that
        share a device within its memory (gpu_memory_utilization shares summing to at most 1)."""
        if self.max_lora_rank not in LORA_RANKS:
            raise ValueError(f"max_lora_rank must be one of {LORA_RANKS}, got {self.max_lora_rank}")
        by_alias: dict[str, ArmConfig] = {}
        for arm in self.arms:
            n = len(device_ids(arm.devices))
            if n and n != self.tensor_parallel_size:
                raise ValueError(f"arm {arm.name}: devices {arm.devices!r} names {n} devices but "
                                 f"tensor_parallel_size is {self.tensor_parallel_size}: name one per shard")
            first = by_alias.setdefault(arm.alias, arm)
            if (first.devices, first.gpu_memory_utilization) != (arm.devices, arm.gpu_memory_utilization):
                raise ValueError(f"arms {first.name} and {arm.name} serve alias {arm.alias!r} from one engine: give "
                                 "them the same devices and gpu_memory_utilization")
        used: dict[int, list[tuple[str, float]]] = {}
        for alias, arm in by_alias.items():
            for d in device_ids(arm.devices):
                used.setdefault(d, []).append((arm.name, self.memory_share(arm)))
        for d, engines in sorted(used.items()):
            if len(engines) > 1 and sum(s for _, s in engines) > 1 + 1e-9:
                shares = ", ".join(f"{name} {share:g}" for name, share in engines)
                raise ValueError(f"device {d} holds the engines of arms {shares}: their gpu_memory_utilization "
                                 "shares sum to more than 1; give each arm its share (e.g. 0.45 each) or its own "
                                 "device")
        return self

    def memory_share(self, arm: ArmConfig) -> float:
        """The arm's engine's gpu_memory_utilization (its own, else serving's)."""
        return arm.gpu_memory_utilization if arm.gpu_memory_utilization is not None else self.gpu_memory_utilization

    @model_validator(mode="after")
    def _no_open_bind_beyond_loopback(self):
        if self.require_key is False and not is_loopback(self.host):
            raise ValueError(f"serving.require_key = false with host {self.host!r}: no server binds beyond loopback "
                             "without auth (docs/security.md, Keys and roles); give clients keys (`rtrl collector "
                             "--keys-new CLIENT --org ORG`) or bind to 127.0.0.1")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file go together: set both to serve HTTPS, or neither")
        return self

    @property
    def key_required(self) -> bool:
        """require_key resolved: an explicit value, else required unless bound to loopback."""
        return self.require_key if self.require_key is not None else not is_loopback(self.host)

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)
