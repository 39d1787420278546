"""Serving's Prometheus metrics, exposed at the gateway's `GET /metrics` (docs/monitoring.md lists each one).

    metrics = ServingMetrics(gateway)        # serving/app.py counts requests into it as they finish
    body, content_type = metrics.exposition()

Counted as requests finish (`ServingMetrics.finished`, `answered`, `first_token`):
    rtrl_serving_requests_total{route, status, arm, version}   every chat request answered, refused or failed;
                                                                arm and version are "" when refused before routing
    rtrl_serving_request_duration_seconds{arm, stream}         received -> answer sent (a stream: its last event)
    rtrl_serving_time_to_first_token_seconds{arm}              streamed requests: received -> first content chunk
    rtrl_serving_tokens_total{arm, kind}                       kind: prompt | completion (of answered requests)
Read from the gateway at each scrape (`GatewayCollector`):
    rtrl_serving_ready                                         1 once every arm's engine is loaded
    rtrl_serving_arm_info{arm, alias, version}                 1 per arm: the version its alias serves now
    rtrl_serving_requests_in_flight{version}                   requests an engine holds (queued or sampling)
    rtrl_serving_swaps_total{mode}                             hot swaps begun: blue_green | in_place
    rtrl_serving_telemetry_events_total{outcome}               trajectory events: sent | spooled | resent |
                                                               sampled_out | dropped_<reason>
    rtrl_serving_telemetry_queue_depth, rtrl_serving_telemetry_spool_bytes
    vllm:*{model_name, engine}                                 each engine's own statistics (serving/vllm_stats.py)

Labels come from small fixed sets: route, status, arm, version, kind, mode, outcome; never a user or a
request id. A version label is the served policy version ("7", "3@acme"): a handful at a time.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from schemas.prometheus import counter_by, exposition, gauge, gauge_by
from serving.vllm_stats import families

CHAT_ROUTE = "/v1/chat/completions"
# seconds: a CPU engine answers in 0.1-30 s, a GPU one in 0.05-5 s; a stream may run for minutes
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class GatewayCollector:
    """The gateway's live state as metrics, read at each scrape (nothing is stored between scrapes)."""

    def __init__(self, gateway):
        self.gateway = gateway

    def collect(self):
        fleet = self.gateway.fleet
        status = fleet.status()
        yield gauge("rtrl_serving_ready", "1 once every arm's engine is loaded, else 0",
                    1.0 if status["ready"] else 0.0)
        arms = GaugeMetricFamily("rtrl_serving_arm_info", "1 per arm: the alias it serves and that alias's version "
                                 "now (empty while loading)", labels=["arm", "alias", "version"])
        for arm, a in sorted(status["arms"].items()):
            arms.add_metric([arm, a["alias"], a["version"] or ""], 1.0)
        yield arms
        by_version: dict[str, int] = {}
        for e in status["engines"]:
            by_version[e["version"]] = by_version.get(e["version"], 0) + e["in_flight"]
        yield gauge_by("rtrl_serving_requests_in_flight", "Requests an engine holds now (waiting for weights, queued "
                       "or sampling), by the version it serves", "version", dict(sorted(by_version.items())))
        in_place = sum(s.in_place for s in fleet.swaps)
        yield counter_by("rtrl_serving_swaps", "Hot swaps begun since the gateway started, by how the new weights "
                         "are loaded", "mode", {"blue_green": len(fleet.swaps) - in_place, "in_place": in_place})
        stats = self.gateway.telemetry_stats() if self.gateway.telemetry_stats is not None else None
        if stats is not None:
            yield from _telemetry(stats)
        yield from families([(f"{self.gateway.model_name}/v{version}", engine, st)
                             for version, engine, st in fleet.engine_stats()])


def _telemetry(stats: dict):
    outcomes = {o: stats.get(o, 0) for o in ("sent", "spooled", "resent", "sampled_out")}
    outcomes |= {f"dropped_{reason}": n for reason, n in sorted((stats.get("dropped") or {}).items())}
    yield counter_by("rtrl_serving_telemetry_events", "Trajectory events the gateway's telemetry client handled, by "
                     "outcome (dropped_<reason>: never sent)", "outcome", outcomes)
    for name, key, help_ in (("rtrl_serving_telemetry_queue_depth", "queue_depth",
                              "Trajectory events waiting to be sent"),
                             ("rtrl_serving_telemetry_spool_bytes", "spool_bytes",
                              "Bytes of trajectory events spooled on disk while Kafka is unreachable")):
        yield gauge(name, help_, stats.get(key, 0))


class ServingMetrics:
    """The gateway's metrics registry: counters and histograms updated as requests finish, and the live state."""

    def __init__(self, gateway=None, enabled: bool = True):
        self.enabled = enabled                  # serving.metrics: false counts nothing (the cost baseline)
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("rtrl_serving_requests", "Chat requests by route, HTTP status, arm and policy "
                                "version (arm and version empty when refused before routing)",
                                ["route", "status", "arm", "version"], registry=r)
        self.duration = Histogram("rtrl_serving_request_duration_seconds", "Chat request received -> answer sent "
                                  "(a stream: its last event)", ["arm", "stream"], buckets=LATENCY_BUCKETS,
                                  registry=r)
        self.ttft = Histogram("rtrl_serving_time_to_first_token_seconds", "Streamed chat request received -> its "
                              "first chunk with content", ["arm"], buckets=TTFT_BUCKETS, registry=r)
        self.tokens = Counter("rtrl_serving_tokens", "Tokens of answered chat requests, by arm and kind "
                              "(prompt | completion)", ["arm", "kind"], registry=r)
        if gateway is not None:
            r.register(GatewayCollector(gateway))

    def finished(self, status: int, seconds: float, arm: str = "", version: str = "", stream: bool = False) -> None:
        """A chat request is over without an answer, or ended: its HTTP status (a stream that failed midway: 500),
        seconds since it was received, and, once routed, its arm and version."""
        if not self.enabled:
            return
        self.requests.labels(CHAT_ROUTE, str(status), arm, version).inc()
        if arm:
            self.duration.labels(arm, "true" if stream else "false").observe(seconds)

    def answered(self, served, seconds: float, stream: bool = False) -> None:
        """A chat request answered (200): `served` (serving.protocol.Served) gives its arm, version and tokens."""
        if not self.enabled:
            return
        self.finished(200, seconds, served.arm, served.policy_version, stream)
        self.tokens.labels(served.arm, "prompt").inc(len(served.prompt_token_ids))
        self.tokens.labels(served.arm, "completion").inc(sum(len(g.token_ids) for g in served.generations))

    def first_token(self, arm: str, seconds: float) -> None:
        if not self.enabled:
            return
        self.ttft.labels(arm).observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition of every metric, and its content type."""
        return exposition(self.registry)
