"""Every server rtrl starts listens on loopback unless configured otherwise: the checked-in
configuration and the code defaults both, for every `host`/`*_host` key of every section (broker, MLflow UI,
collector, serving, orchestrator UI, dashboard)."""

from __future__ import annotations

import pytest

import ipaddress
import tomllib
from pathlib import Path

from pydantic import BaseModel

from infra.config import RtrlConfig, load_config

TOML = Path(__file__).parents[3] / "infra" / "rtrl.toml"


def _hosts(model: BaseModel, prefix: str = "") -> dict[str, str]:
    out = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out.update(_hosts(value, f"{prefix}{name}."))
        elif isinstance(value, str) and (name == "host" or name.endswith("_host")):
            out[prefix + name] = value
    return out


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@pytest.mark.integration
def test_every_bind_host_in_the_checked_in_config_is_loopback():
    hosts = _hosts(load_config(TOML, []))
    assert {"kafka.host", "mlflow.ui_host", "collector.host", "serving.host"} <= set(hosts)
    assert {k: v for k, v in hosts.items() if not _loopback(v)} == {}


def test_every_bind_host_default_in_code_is_loopback_and_the_file_sets_none_to_a_wildcard():
    assert {k: v for k, v in _hosts(RtrlConfig()).items() if not _loopback(v)} == {}

    def walk(d: dict, prefix: str = ""):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from walk(v, f"{prefix}{k}.")
            elif k == "host" or k.endswith("_host"):
                yield prefix + k, v

    assert {k: v for k, v in walk(tomllib.loads(TOML.read_text())) if not _loopback(v)} == {}
