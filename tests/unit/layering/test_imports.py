"""Package boundaries (docs/architecture.md): each top-level package imports only the packages below it. A new upward
or sideways import fails here; the few edges that are truly needed are listed in ALLOWED_EDGES with their reason.

Read from the source with `ast` (nothing is imported), so a lazy import inside a function counts too."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# What each package may import of ours. Lower layers first: schemas is the floor.
LAYERS: dict[str, set[str]] = {
    "schemas": set(),
    "registry": {"schemas"},
    "codetasks": {"schemas"},
    "instrumentation": {"schemas", "codetasks"},
    "pipelines": {"schemas"},
    "trainer": {"schemas", "codetasks", "registry"},
    "serving": {"schemas", "registry", "instrumentation"},
    "evals": {"schemas", "codetasks", "registry"},
    "infra": {"schemas", "registry", "codetasks", "instrumentation", "pipelines", "trainer", "serving", "evals"},
}

# (importing module, imported package or module prefix): why it is allowed.
ALLOWED_EDGES: dict[tuple[str, str], str] = {
    ("evals/endpoints.py", "serving"): "the gate serves a version through serving's own gateway (the real path)",
}

# Modules of the demo (its orchestration and time budget): nothing but the demo's own command imports them, and
# `rtrl bench services`, `rtrl bench live` and `rtrl bench soak`, benchmarks that set the demo's loop up (v0,
# serving, users).
DEMO_MODULES = ("infra.orchestrator.demo", "infra.orchestrator.budget")
DEMO_IMPORTERS = {"infra/commands/demo.py", "infra/orchestrator/demo.py", "infra/orchestrator/demo_definitions.py",
                  "infra/bench/services.py", "infra/bench/live.py", "infra/bench/soak.py"}


@lru_cache(maxsize=None)
def _imports(path: Path) -> tuple[str, ...]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
            out += [f"{node.module}.{a.name}" for a in node.names]
    return tuple(out)


def _modules() -> list[Path]:
    return sorted(p for pkg in LAYERS for p in (REPO / pkg).rglob("*.py"))


def violations(files: list[Path], root: Path = REPO) -> list[str]:
    bad = []
    for f in files:
        rel = f.relative_to(root).as_posix()
        pkg = rel.split("/")[0]
        for name in _imports(f):
            top = name.split(".")[0]
            if top not in LAYERS or top == pkg or top in LAYERS[pkg]:
                continue
            if any(rel == m and (name == p or name.startswith(p + ".")) for (m, p) in ALLOWED_EDGES):
                continue
            bad.append(f"{rel} imports {name}")
    return sorted(set(bad))


def test_every_package_imports_only_the_layers_below_it():
    found = violations(_modules())
    assert found == [], "upward or sideways imports:\n  " + "\n  ".join(found)


def test_a_new_upward_import_is_reported(tmp_path):
    pkg = tmp_path / "schemas"
    pkg.mkdir()
    (pkg / "leak.py").write_text("def f():\n    from infra.config import load_config\n")
    assert violations([pkg / "leak.py"], root=tmp_path) == ["schemas/leak.py imports infra.config",
                                                            "schemas/leak.py imports infra.config.load_config"]


def test_every_allowed_edge_is_still_used():
    """An allow-list entry whose import is gone is removed, so the list never grows stale."""
    for (module, prefix), why in ALLOWED_EDGES.items():
        names = _imports(REPO / module)
        assert any(n == prefix or n.startswith(prefix + ".") for n in names), f"{module} -> {prefix} ({why})"


@pytest.mark.parametrize("module", DEMO_MODULES)
def test_no_production_module_imports_the_demo(module):
    importers = sorted(f.relative_to(REPO).as_posix() for f in _modules()
                       if any(n == module or n.startswith(module + ".") for n in _imports(f)))
    assert set(importers) <= DEMO_IMPORTERS, f"{module} is imported by {importers}"


def test_no_vllm_plugin_is_registered():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "vllm.general_plugins" not in project.get("entry-points", {})
