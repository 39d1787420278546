"""A real gateway (vLLM engines, MLflow registry, the session broker) in a thread of the test process, and the
official `openai` client against it: shared by the serving integration tests."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from tests.integration.kafka_read import read_json_records
from tests.waiting import wait_for


@contextmanager
def running_gateway(cfg, start_timeout_s: float = 240.0) -> Iterator:
    """The gateway for `cfg`, serving on `cfg.serving.port` until the block ends."""
    import uvicorn  # noqa: F401 -- fail here, not in the thread, when serving deps are missing

    from serving.server import build_gateway, make_server

    gateway = build_gateway(cfg)
    server = make_server(cfg, gateway=gateway, log_level="warning")
    thread = threading.Thread(target=server.run, name="gateway", daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), start_timeout_s, "the gateway starting", interval_s=0.2)
    assert server.started, "the gateway did not start (see the log above)"
    try:
        yield gateway
    finally:
        server.should_exit = True
        thread.join(timeout=120)


def openai_client(url: str):
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def teacher_forced_logprobs(model, prompt_ids: list[int], completion_ids: list[int]):
    """log-softmax of `model` (a transformers causal LM) at each completion token, given everything before it."""
    import torch

    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    n = len(prompt_ids)
    return torch.log_softmax(logits[n - 1:-1], dim=-1).gather(1, torch.tensor(completion_ids)[:, None])[:, 0]


def users_of(gateway, arm: str, n: int) -> list[str]:
    users, i = [], 0
    while len(users) < n:
        if gateway.router.assign(f"user-{i}") == arm:
            users.append(f"user-{i}")
        i += 1
    return users


def trajectories(bootstrap: str, partitions: int, request_ids: set[str], deadline_s: float = 30.0) -> dict[str, dict]:
    """Trajectory events on the `trajectories` topic with these request ids (read from the beginning)."""
    return read_json_records(bootstrap, [("trajectories", p) for p in range(partitions)],
                             lambda d: d.get("request_id") if d.get("request_id") in request_ids else None,
                             lambda found: request_ids <= set(found), deadline_s)
