"""A vLLM worker extension (`worker_extension_cls`): reload a checkpoint's weights in place, including the kernels
that vLLM derives from weights the checkpoint does not carry.

vLLM's in-place `reload_weights` loads each layer's checkpoint tensors and re-runs that layer's
`process_weights_after_loading`. A layer whose weights are not in the checkpoint keeps what it had. With tied word
embeddings (the default policy's `tie_word_embeddings = true`) the LM head is such a layer: its weight *is* the
input embedding, which the reload refreshes, but on CPU its matmul runs on a packed copy made when the engine was
first loaded (oneDNN / sgl kernels, `dispatch_cpu_unquantized_gemm`). A reloaded engine then computed the new body
with the old head: its log-probs were off by a mean of ~1e-3 (up to 0.3) from the checkpoint's, so the served
treatment was not exactly the registered version.

`rtrl_reload_weights` runs vLLM's reload and then re-runs the weight processing of every layer that shares its
weight tensor with another layer (the tied head), so every derived kernel is made from the new values. Loaded in
the worker processes by name (`serving.engine.engine_args`), called with `collective_rpc("rtrl_reload_weights")`.
"""

from __future__ import annotations


def tied_layers(model) -> list[tuple[str, object]]:
    """(name, module) of the layers with a quant method whose `weight` is the same tensor as an earlier layer's
    (a tied LM head), in module order."""
    seen: set[int] = set()
    tied = []
    for name, module in model.named_modules():
        weight = getattr(module, "_parameters", {}).get("weight")
        if weight is None:
            continue
        if id(weight) in seen and getattr(module, "quant_method", None) is not None:
            tied.append((name, module))
        seen.add(id(weight))
    return tied


class InPlaceReload:
    """Mixed into vLLM's worker class (the worker is `self`)."""

    def rtrl_reload_weights(self, weights_path: str) -> list[str]:
        """Reload from `weights_path` and refresh the kernels of tied layers; the names of the refreshed layers."""
        self.reload_weights(weights_path=weights_path)
        refreshed = []
        for name, module in tied_layers(self.model_runner.get_model()):
            module.quant_method.process_weights_after_loading(module)
            refreshed.append(name)
        return refreshed
