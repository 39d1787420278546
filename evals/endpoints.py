"""An OpenAI-compatible endpoint serving one registered version for the eval (the real serving path).

    with serve_version(cfg, registry, "7", arm="candidate") as url:      # http://127.0.0.1:<port>/v1
        episodes = run_suite(tasks, OpenAIPolicy(url), arm="candidate", ...)

    stage(cfg, "7", cpu_cores="1")                          # on the running `rtrl serve` (gate.tasks.via_serving)
    url, model = staged_model(cfg, "7")
    episodes = run_suite(tasks, OpenAIPolicy(url, model=model, **serving_chat_options(cfg)), ...)
    unstage(cfg, "7")

`stage` asks the running gateway to load the version beside its arms' engines (POST /admin/stage, with the admin
key of local tools: RTRL_ADMIN_KEY, else <state_dir>/admin.key, which `rtrl serve` makes; see serving.auth); requests
whose model names it are pinned to it and never logged as trajectories. The chat requests on the running gateway
carry the same admin key (any valid key may chat; it is the one the gate holds) and, when serving terminates TLS,
trust exactly its configured certificate (`serving_chat_options`). The champion is usually loaded there
already, and a candidate that is promoted is switched to without a second load: the gate leaves a candidate it
promotes staged, the deploy step unstages it once the alias holds it, and serving expires a forgotten stage.

It is the gateway `rtrl serve` runs (vLLM engine, the chat template, the strict tool-call parser), with one arm
pinned to the version instead of following a registry alias, an ephemeral localhost port, and no telemetry: eval
traffic must never become training traffic. The gateway runs in a thread of this process (the vLLM engine in the
processes it spawns); leaving the block shuts it down.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

STARTUP_TIMEOUT_S = 600.0


class PinnedRegistry:
    """The registry as serving's Fleet reads it, with `alias` pinned to `version` (nothing else is resolved)."""

    def __init__(self, registry, alias: str, version: str):
        self.registry, self.alias, self.version = registry, alias, version

    def version_of(self, alias: str) -> str | None:
        return self.version if alias == self.alias else None

    def served_path(self, version: str) -> Path:
        return self.registry.served_path(version)

    def master_path(self, version: str) -> Path:
        return self.registry.master_path(version)



class EndpointError(RuntimeError):
    """The eval endpoint did not come up (the version could not be loaded or served)."""


@contextmanager
def serve_version(cfg, registry, version: str, *, arm: str, log_level: str = "warning") -> Iterator[str]:
    """An OpenAI-compatible base URL serving `version` as arm `arm` until the block exits."""
    from serving.config import ArmConfig
    from serving.server import build_gateway, make_server

    alias = f"eval-{arm}"
    scfg = cfg.serving.model_copy(update={
        "host": "127.0.0.1", "port": 0, "telemetry": False, "registry_poll_s": 3600.0,   # port 0: ephemeral
        "cpu_cores": cfg.gate.tasks.engine_cpu_cores or cfg.serving.cpu_cores,
        "spare_engines": 0,                       # one version, never swapped: no warm spares to fill
        "require_key": None, "tls_cert_file": "", "tls_key_file": "",   # a private loopback endpoint: plain, open
        "arms": [ArmConfig(name=arm, alias=alias, share=1.0)]})
    run_cfg = cfg.model_copy(update={"serving": scfg})
    gateway = build_gateway(run_cfg, registry=PinnedRegistry(registry, alias, version))
    server = make_server(run_cfg, gateway=gateway, log_level=log_level)
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            server.run()
        except BaseException as e:  # noqa: BLE001 -- reported to the caller below
            errors.append(e)

    thread = threading.Thread(target=serve, name=f"eval-endpoint-{arm}", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    if not server.started:
        server.should_exit = True
        thread.join(timeout=60)
        why = f"{type(errors[0]).__name__}: {errors[0]}" if errors else "it did not start in time (see the log)"
        raise EndpointError(f"serving version {version} for the {arm} arm failed: {why}")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=120)


def _admin(cfg, path: str, body: dict, timeout_s: float) -> dict:
    """POST an admin request to the running gateway with the admin key of local tools (over HTTPS when serving
    terminates TLS, trusting exactly its configured certificate)."""
    from serving.auth import ADMIN_KEY_ENV
    from serving.server import admin_key, admin_key_file, tls_client_context, url_of

    base = url_of(cfg.serving)
    headers = {"content-type": "application/json"}
    if key := admin_key(cfg):
        headers["authorization"] = f"Bearer {key}"
    req = urllib.request.Request(f"{base}{path}", data=json.dumps(body).encode(), method="POST", headers=headers)
    ctx = tls_client_context(cfg.serving.tls_cert_file) if cfg.serving.tls else None
    try:
        with urllib.request.urlopen(req, timeout=timeout_s, context=ctx) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")[:500]
        hint = ""
        if e.code in (401, 403):
            hint = (f" (the admin key comes from {ADMIN_KEY_ENV}, else {admin_key_file(cfg)}, which `rtrl serve` "
                    "makes; it needs role admin)")
        raise EndpointError(f"serving refused {path} {body}: HTTP {e.code}: {detail}{hint}") from None
    except (urllib.error.URLError, OSError) as e:
        raise EndpointError(f"serving at {base} is not reachable for {path}: {e}") from None


def stage(cfg, version: str, cpu_cores: str = "") -> float:
    """Load `version` in the running gateway for pinned requests; the seconds the load took (0: was loaded)."""
    return _admin(cfg, "/admin/stage", {"version": str(version), "cpu_cores": cpu_cores}, STARTUP_TIMEOUT_S)["load_s"]


def unstage(cfg, version: str) -> bool:
    return bool(_admin(cfg, "/admin/unstage", {"version": str(version)}, 60.0)["unstaged"])


def serving_chat_options(cfg) -> dict:
    """`OpenAIPolicy` keyword arguments for chat on the running gateway: `api_key`, the admin key of local tools
    (None when there is none: the placeholder, which chat accepts where it needs no key), and `verify`, an SSL
    context trusting exactly serving's configured certificate when it speaks TLS (else None: the default)."""
    from serving.server import admin_key, tls_client_context

    return {"api_key": admin_key(cfg),
            "verify": tls_client_context(cfg.serving.tls_cert_file) if cfg.serving.tls else None}


def staged_model(cfg, version: str) -> tuple[str, str]:
    """(base URL, model name) that pin a request to `version` staged on the running gateway."""
    from serving.server import url_of

    return f"{url_of(cfg.serving)}/v1", f"{cfg.mlflow.registered_model}/v{version}"
