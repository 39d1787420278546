"""Configuration of the ingest collector (`[collector]` in rtrl.toml)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CollectorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field(default="127.0.0.1", description="Bind address; localhost by default.")
    port: int = Field(default=18080, ge=1, le=65535, description="The collector's port (POST /v1/events).")
    api_keys_file: str = Field(default="", description="Hashed client keys (JSON); '' means <state_dir>/collector_keys.json.")
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024, description="Request size cap.")
    max_events_per_batch: int = Field(default=1000, ge=1, le=100_000, description="Most events one request may "
                                      "carry; a larger batch is refused whole (413).")
    rate_limit_events_per_s: float = Field(default=20_000, gt=0, description="Per-client sustained event rate.")
    rate_limit_burst: int = Field(default=40_000, ge=1, description="Per-client token-bucket size (events).")
    signature_max_skew_s: int = Field(default=300, ge=1, le=3600,
                                      description="HMAC-signed requests older or newer than this are rejected.")
    nonce_cache_max_entries: int = Field(
        default=1_000_000, ge=1_000, le=100_000_000,
        description="Bound on remembered (client, nonce) pairs of signed requests (each kept for the skew window); "
        "when full, further signed requests get 429 until entries expire (never forgotten early: no replay).")
    body_read_timeout_s: float = Field(default=30.0, gt=0, le=600,
                                       description="A request body not fully received within this gets 408.")
    header_timeout_s: float = Field(default=10.0, gt=0, le=600,
                                    description="A connection whose request line and headers are not complete this "
                                    "long after the connection opened or its previous request ended is closed (a "
                                    "client sending its headers slowly holds no connection open).")
    trusted_proxies: list[str] = Field(default_factory=list, description="Addresses (or CIDR ranges) of reverse "
                                       "proxies whose X-Forwarded-For / X-Forwarded-Proto name the client; [] = "
                                       "trust none: the client is the TCP peer, whatever the headers say (the "
                                       "per-address limits key on it).")
    produce_timeout_s: float = Field(default=10.0, gt=0, le=600,
                                     description="Wait for Kafka acks (acks=all) per batch; past it the answer is 503.")
    health_cache_s: float = Field(default=1.0, ge=0, le=60,
                                  description="How long a Kafka reachability probe result is reused by /healthz.")
    metrics: bool = Field(default=True, description="Serve GET /metrics (docs/monitoring.md) and time each ingest "
                          "request for it. false: /metrics answers 404 (the baseline of `rtrl bench ingest`'s cost "
                          "of metrics).")
    startup_timeout_s: float = Field(default=30.0, gt=0, le=600,
                                     description="`rtrl collector --detach` waits this long for /healthz to answer.")
    access_log: bool = Field(default=False, description="Log one line per HTTP request (uvicorn access log).")
    rate_limit_requests_per_s: float = Field(
        default=500, gt=0, description="Per-client sustained request rate (an empty batch counts as a request).")
    rate_limit_request_burst: int = Field(default=1000, ge=1, description="Per-client request bucket size.")
    rate_limit_unauthenticated_per_s: float = Field(
        default=10, gt=0, description="Per remote address: sustained rate of requests that are not authenticated "
        "(failed credentials, /healthz, /openapi.json); over it every request from the address gets 429 before "
        "its credentials are checked.")
    rate_limit_unauthenticated_burst: int = Field(default=100, ge=1,
                                                  description="Per remote address unauthenticated bucket size.")
    rate_limit_max_addresses: int = Field(default=100_000, ge=100, le=10_000_000,
                                          description="Remote addresses tracked at once (least recently seen "
                                                      "dropped first).")
    max_header_bytes: int = Field(default=16 * 1024, ge=1024, le=1024 * 1024,
                                  description="Request line plus headers larger than this: 431 (400 if the HTTP "
                                              "parser stops it first).")
    max_headers: int = Field(default=64, ge=8, le=1000, description="More request headers than this: 431.")
    max_event_skew_future_s: float = Field(
        default=300, ge=1, le=86400,
        description="An event_time more than this after the collector's receipt time is rejected (per event, "
        "reason 'event_time ... after receipt') and counted.")
    max_event_skew_past_s: float = Field(
        default=7 * 86400, ge=60, le=365 * 86400,
        description="An event_time more than this before receipt is rejected and counted (the SDK spools while "
        "offline; the data-quality suite's max_event_age_s should not be smaller).")
    redact: bool = Field(default=True, description="Redact secrets in the events' free-text fields again on "
                         "receipt (the SDK's redactor; a backstop for clients that do not use the SDK).")
    tls_cert_file: str = Field(default="", description="PEM certificate (chain) to terminate TLS with; '' = plain "
                               "HTTP. Needs tls_key_file.")
    tls_key_file: str = Field(default="", description="PEM private key of tls_cert_file.")

    @model_validator(mode="after")
    def _burst_fits_a_batch(self):
        if self.rate_limit_burst < self.max_events_per_batch:
            raise ValueError(f"rate_limit_burst ({self.rate_limit_burst}) must be at least max_events_per_batch "
                             f"({self.max_events_per_batch}), or a full batch could never be accepted")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file go together: set both to serve HTTPS, or neither")
        return self

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)
