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

`rtrl_update_weights` is the same reload of only the layers whose tensors changed (a version shipped as a delta,
registry/shipping.py): it reads those tensors from the new served copy, checks each one's SHA-256 against the
digests it is given *before* loading anything, and hands vLLM's in-place reload just them (every tensor of a
packed layer, e.g. q, k and v of `qkv_proj`, so no layer is half loaded). A layer given no tensor keeps what it
had. A mismatch loads nothing and returns the tensors that differ.
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


def layer_of(name: str, packed: dict[str, list[str]]) -> str:
    """The vLLM layer a checkpoint tensor loads into: its module, with a packed part named by its packed layer
    (`...self_attn.q_proj.weight` -> `...self_attn.qkv_proj`)."""
    module = name.rpartition(".")[0]
    parent, _, leaf = module.rpartition(".")
    for fused, parts in packed.items():
        if leaf in parts:
            return f"{parent}.{fused}" if parent else fused
    return module


def tensors_to_load(changed: list[str], all_names: list[str], packed: dict[str, list[str]]) -> list[str]:
    """Every tensor of the layers `changed` tensors load into, in `all_names`' order."""
    layers = {layer_of(n, packed) for n in changed}
    return [n for n in all_names if layer_of(n, packed) in layers]


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

    def rtrl_update_weights(self, weights_path: str, changed: list[str], digests: dict[str, str]) -> dict:
        """Reload, in place, the layers of the `changed` tensors from the served copy at `weights_path`, each tensor
        checked against `digests` first; {"loaded": [names], "mismatched": [names]} (nothing loaded when any
        mismatched)."""
        import torch

        from registry.delta import digest
        from registry.served import weights_of

        model = self.model_runner.get_model()
        tensors = weights_of(weights_path)
        names = tensors_to_load(changed, sorted(tensors), dict(getattr(model, "packed_modules_mapping", {}) or {}))
        mismatched = [n for n in names if digests.get(n) != digest(tensors[n].data)]
        if mismatched:
            return {"loaded": [], "mismatched": mismatched}
        dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
        pairs = [(n, torch.frombuffer(bytearray(tensors[n].data), dtype=dtypes[tensors[n].dtype])
                  .reshape(tensors[n].shape)) for n in names]
        self.reload_weights(weights_iterator=iter(pairs))
        for _, module in tied_layers(model):
            module.quant_method.process_weights_after_loading(module)
        return {"loaded": names, "mismatched": []}

