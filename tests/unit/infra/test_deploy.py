"""The cluster form's checked-in files (docs/deployment.md): `infra/deploy/production.example.toml` is a valid
configuration, and the Kubernetes manifests pass the API schema (strict) and agree with it: each container runs an
`rtrl` command that exists, with the ports, paths, secrets and service names the configuration names."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from infra.config import load_config

REPO = Path(__file__).parents[3]
DEPLOY = REPO / "infra" / "deploy"
EXAMPLE = DEPLOY / "production.example.toml"
K8S_VERSION = "1.33.0"
SECRET_KEYS = {"kafka-password", "aws-access-key-id", "aws-secret-access-key", "pgpassword", "mlflow-username",
               "mlflow-password"}


def _docs() -> list[tuple[str, dict]]:
    out = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        out += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def _containers(kind: str | None = None):
    for name, doc in _docs():
        if doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]["spec"]
            for c in pod["containers"]:
                yield name, doc, pod, c


def _by_component(component: str):
    found = [(doc, pod, c) for _, doc, pod, c in _containers()
             if doc["metadata"]["labels"].get("app.kubernetes.io/component") == component]
    assert found, f"no Deployment for {component}"
    return found


@pytest.fixture(scope="module")
def cfg():
    return load_config(str(EXAMPLE))


def test_the_production_example_is_a_valid_configuration_of_the_cluster_form(cfg):
    assert cfg.kafka.bootstrap_servers and cfg.kafka.security_protocol == "SASL_SSL"
    assert cfg.kafka.replication_factor == 3 and cfg.kafka.sasl_password_env
    for url in (cfg.rewards_dir, cfg.archive.output_dir, cfg.mlflow.server.artifacts_destination,
                cfg.orchestrator.ledger):
        assert url.startswith("s3://"), url
    assert urlsplit(cfg.mlflow.tracking_uri).scheme == "http"
    for url in (cfg.mlflow.promotion_lock, cfg.mlflow.server.backend_store_uri, cfg.orchestrator.postgres_url):
        assert url.startswith("postgresql://") and ":" not in urlsplit(url).netloc.split("@")[0], \
            f"{url}: no password in the config"
    assert cfg.trainer.precision == "bf16" and cfg.serving.dtype == "bfloat16"


def test_every_manifest_passes_the_kubernetes_api_schema_strictly():
    import kubernetes_validate

    docs = _docs()
    assert {d["kind"] for _, d in docs} >= {"Namespace", "Deployment", "Service", "PersistentVolumeClaim"}
    for name, doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_schema_check_refuses_a_misspelt_field():
    import kubernetes_validate

    _, doc = next((n, d) for n, d in _docs() if d["kind"] == "Deployment")
    bad = copy.deepcopy(doc)
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_each_rtrl_container_runs_an_existing_command_with_the_mounted_config():
    from infra.cli import build_parser

    commands = set(next(a for a in build_parser()._actions if a.dest == "command").choices)
    rtrl_containers = 0
    for name, _, pod, c in _containers():
        args = c.get("args") or c.get("command")
        if args[0] != "rtrl":
            assert args[0] in ("dask",), f"{name}: {args[0]}"
            continue
        rtrl_containers += 1
        assert args[1:3] == ["--config", "/etc/rtrl/rtrl.toml"], f"{name}: {args}"
        assert args[3] in commands, f"{name}: `rtrl {args[3]}` is no command"
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        assert volumes[mounts["/etc/rtrl"]]["configMap"]["name"] == "rtrl-config", name
    assert rtrl_containers >= 6


def test_ports_and_addresses_agree_with_the_configuration(cfg):
    def port(component: str, name: str) -> int:
        (_, _, c), *_ = _by_component(component)
        return next(p["containerPort"] for p in c["ports"] if p["name"] == name)

    assert port("collector", "https") == cfg.collector.port
    assert port("serving", "https") == cfg.serving.port
    assert port("mlflow", "http") == cfg.mlflow.server.port
    services = {d["metadata"]["name"]: d for _, d in _docs() if d["kind"] == "Service"}
    mlflow = urlsplit(cfg.mlflow.tracking_uri)
    assert mlflow.hostname == "mlflow.rtrl.svc" and mlflow.port in {p["port"] for p in services["mlflow"]["spec"]["ports"]}
    dask = next(o for o in cfg.beam.options if o.startswith("--dask_client_address="))
    assert dask.endswith(f"dask-scheduler.rtrl.svc:{services['dask-scheduler']['spec']['ports'][0]['port']}")


def test_every_process_with_metrics_is_annotated_for_prometheus_on_its_metrics_port(cfg):
    want = {"serving": (cfg.serving.port, "https"), "collector": (cfg.collector.port, "https"),
            "archiver": (cfg.archive.metrics_port, "http"), "orchestrator-daemon": (cfg.monitoring.port, "http")}
    for component, (port, scheme) in want.items():
        (doc, pod, _), *_ = _by_component(component)
        notes = doc["spec"]["template"]["metadata"].get("annotations", {})
        assert notes.get("prometheus.io/scrape") == "true", component
        assert (int(notes["prometheus.io/port"]), notes["prometheus.io/scheme"]) == (port, scheme), component
        assert any(p["containerPort"] == port for c in pod["containers"] for p in c.get("ports", [])), \
            f"{component}: no container port {port}"
    assert cfg.archive.metrics_host == "0.0.0.0" and cfg.monitoring.host == "0.0.0.0"   # reachable from the scraper


def test_secrets_and_files_the_configuration_names_are_mounted_where_it_reads_them(cfg):
    needs_kafka = ("collector", "archiver", "serving", "orchestrator-daemon")
    for component in needs_kafka:
        for _, _, c in _by_component(component):
            if c["name"] == "metrics":       # the cycle's exporter beside the daemon reads the ledger, not Kafka
                continue
            env = {e["name"] for e in c.get("env", [])}
            assert cfg.kafka.sasl_password_env in env, f"{component} reads Kafka without its password"
    for component, files in (("collector", (cfg.collector.tls_cert_file, cfg.collector.api_keys_file)),
                             ("serving", (cfg.serving.tls_cert_file, cfg.serving.api_keys_file))):
        (_, _, c), *_ = _by_component(component)
        mounted = [m["mountPath"] for m in c["volumeMounts"]]
        for f in files:
            assert any(f.startswith(m.rstrip("/") + "/") for m in mounted), f"{component}: {f} is not mounted"
    used = {e["valueFrom"]["secretKeyRef"]["key"] for _, _, _, c in _containers() for e in c.get("env", [])
            if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]}
    assert used <= SECRET_KEYS, used - SECRET_KEYS
    guide = (REPO / "docs" / "deployment.md").read_text()
    for key in SECRET_KEYS:
        assert re.search(rf"\b{re.escape(key)}\b", guide), f"docs/deployment.md does not name secret key {key}"


def test_only_the_mlflow_server_and_the_data_plane_hold_object_store_credentials():
    holders = {doc["metadata"]["labels"]["app.kubernetes.io/component"] for _, doc, _, c in _containers()
               if any(e["name"] == "AWS_SECRET_ACCESS_KEY" for e in c.get("env", []))}
    assert holders == {"mlflow", "archiver", "dask-worker", "orchestrator-daemon"}, \
        "serving, the dashboard and the UI load versions through the MLflow server's proxy"
