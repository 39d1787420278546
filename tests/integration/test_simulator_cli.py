"""`rtrl simulate` against the real broker and an OpenAI-compatible endpoint: the users' events land on the
telemetry topics with the request ids the endpoint answered, and the summary counts them."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from infra.argv import rtrl_argv
from tests.integration.kafka_read import read_json_records
from tests.integration.test_sdk_kafka import partitions_of
from tests.unit.simulator.mock_server import MockServing

pytestmark = pytest.mark.integration
REPO = Path(__file__).parents[2]


def _events_of_run(bootstrap: str, partitions: dict[str, int], run: str, n: int) -> list[dict]:
    """Every event of the run (its session ids carry the run id); polls until `n` are seen."""
    from schemas.topics import EVENT_TOPICS

    found = read_json_records(bootstrap, [(t, p) for t in EVENT_TOPICS for p in range(partitions[t])],
                              lambda d: d["event_id"] if run in str(d.get("session_id", "")) else None,
                              lambda found: len(found) >= n, 60)
    return list(found.values())


def test_simulate_drives_the_endpoint_and_its_events_reach_kafka(stack, tmp_path):
    cfg = stack.cfg
    sets = [f'state_dir="{cfg.state_dir}"', f"kafka.port={cfg.kafka.port}", "simulator.privacy_rate=0.0"]
    with MockServing() as serving:
        out = subprocess.run(rtrl_argv("simulate", "--users", "4", "--duration", "4", "--speed", "3000", "--seed", "11",
                                       "--endpoint", serving.url, overrides=sets),
                             cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)["simulate"]
    assert "simulate · requests" in out.stderr
    assert summary["requests"] == len(serving.ids) > 10 and summary["by_arm"] == {"treatment": summary["requests"]}
    assert summary["telemetry"]["sent"] == summary["events_emitted"]["total"] and not summary["telemetry"]["dropped"]
    assert summary["edits"]["applied"] > 0 and summary["by_outcome"].get("broken", 0) > 0
    events = _events_of_run(cfg.kafka.bootstrap(), partitions_of(stack), summary["run"],
                         summary["events_emitted"]["total"])
    assert len(events) == summary["events_emitted"]["total"]
    by_type = Counter(e["event_type"] for e in events)
    assert by_type == Counter({k: v for k, v in summary["events_emitted"].items() if k != "total"})
    ids = set(serving.ids)
    for e in events:
        rid = e.get("request_id") or e.get("previous_request_id")
        assert rid is None or rid in ids
        assert datetime.fromisoformat(e["event_time"]) <= datetime.fromisoformat(e["received_time"])
    meta = {(b["user"], b["metadata"]["workspace_id"], b["metadata"]["org_id"]) for b in serving.bodies}
    assert {(e["user_id"], e["workspace_id"], e["org_id"]) for e in events} <= meta
    broken = [e for e in events if e["event_type"] == "tool_call_result" and not e["ok"]]
    assert broken and all(e["error_kind"] == "tool_error" for e in broken)
