"""infra/bench/gpu.py runs on a GPU machine that has only torch, transformers, peft and triton: it imports nothing
of rtrl but `trainer.logprobs` (torch only), which imports nothing of rtrl either."""

import ast
from pathlib import Path

REPO = Path(__file__).parents[3]
RTRL_PACKAGES = {"codetasks", "evals", "infra", "instrumentation", "pipelines", "registry", "schemas", "serving",
                 "trainer"}


def imports_of(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_the_gpu_check_imports_only_torch_side_modules_of_rtrl():
    ours = {m for m in imports_of(REPO / "infra/bench/gpu.py") if m.split(".")[0] in RTRL_PACKAGES}
    assert ours == {"trainer.logprobs"}
    deeper = {m for m in imports_of(REPO / "trainer/logprobs.py") if m.split(".")[0] in RTRL_PACKAGES}
    assert deeper <= {"trainer.kernels.fused_logprobs"}
    assert {m.split(".")[0] for m in imports_of(REPO / "trainer/kernels/fused_logprobs.py")} <= {
        "__future__", "torch", "triton"}
    assert (REPO / "trainer/__init__.py").read_text().strip().startswith('"""') and \
        not imports_of(REPO / "trainer/__init__.py")
