"""serving.vllm_reload: which layers a reload must re-process besides those the checkpoint loads (tied weights)."""

import pytest
import torch

from serving.vllm_reload import InPlaceReload, tied_layers


class _Method:
    def __init__(self):
        self.processed = []

    def process_weights_after_loading(self, layer):
        self.processed.append(layer)


class _Layer(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = weight
        self.quant_method = _Method()


class _TiedModel(torch.nn.Module):
    def __init__(self, tie: bool):
        super().__init__()
        self.embed = _Layer(torch.nn.Parameter(torch.zeros(4, 2)))
        self.body = _Layer(torch.nn.Parameter(torch.zeros(2, 2)))
        self.head = _Layer(self.embed.weight if tie else torch.nn.Parameter(torch.zeros(4, 2)))


def test_a_head_sharing_the_embedding_tensor_is_the_tied_layer():
    assert [name for name, _ in tied_layers(_TiedModel(tie=True))] == ["head"]


def test_untied_layers_are_not_reprocessed():
    assert tied_layers(_TiedModel(tie=False)) == []


def test_the_reload_reprocesses_the_tied_head_after_vllms_reload():
    model = _TiedModel(tie=True)
    calls = []

    class Worker(InPlaceReload):
        class model_runner:
            @staticmethod
            def get_model():
                calls.append("get_model")
                return model

        def reload_weights(self, weights_path):
            calls.append(("reload", weights_path))

    assert Worker().rtrl_reload_weights("/ckpt/v2") == ["head"]
    assert calls == [("reload", "/ckpt/v2"), "get_model"]
    assert model.head.quant_method.processed == [model.head] and model.embed.quant_method.processed == []


PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def test_a_changed_part_of_a_packed_layer_loads_every_part_of_that_layer_and_nothing_else():
    from serving.vllm_reload import layer_of, tensors_to_load

    names = [f"model.layers.0.self_attn.{p}_proj.{k}" for p in "qkvo" for k in ("weight", "bias") if k == "weight"
             or p != "o"] + ["model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
                             "model.layers.0.mlp.down_proj.weight", "model.norm.weight"]
    assert layer_of("model.layers.0.self_attn.k_proj.bias", PACKED) == "model.layers.0.self_attn.qkv_proj"
    assert tensors_to_load(["model.layers.0.self_attn.k_proj.weight"], names, PACKED) == [
        f"model.layers.0.self_attn.{p}_proj.{k}" for p in "qkv" for k in ("weight", "bias")]
    assert tensors_to_load(["model.norm.weight", "model.layers.0.mlp.up_proj.weight"], names, PACKED) == [
        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight", "model.norm.weight"]


def _served_copy(folder, tensors):
    from registry.shipping import write_digests
    from registry.served import write_weights

    folder.mkdir(parents=True)
    write_weights(folder, tensors)
    write_digests(folder, tensors)
    return folder


def _tensor(values):
    import numpy as np

    from registry.delta import Tensor

    return Tensor("F32", (len(values),), np.asarray(values, dtype=np.float32).tobytes())


def test_an_update_checks_every_tensor_before_loading_any_and_loads_only_the_changed_layers(tmp_path):
    from registry.shipping import tensor_digests
    from serving.engine import changed_tensors

    old = _served_copy(tmp_path / "v1", {"a.weight": _tensor([1, 2]), "b.weight": _tensor([3, 4])})
    new = _served_copy(tmp_path / "v2", {"a.weight": _tensor([1, 2]), "b.weight": _tensor([3, 5])})
    assert changed_tensors(tensor_digests(old), tensor_digests(new)) == ["b.weight"]
    assert changed_tensors(tensor_digests(old), tensor_digests(tmp_path)) is None   # not a served copy: all of it
    assert changed_tensors(None, tensor_digests(new)) is None
    model = _TiedModel(tie=True)
    loaded = []

    class Worker(InPlaceReload):
        class model_runner:
            @staticmethod
            def get_model():
                return model

        def reload_weights(self, weights_iterator):
            loaded.extend((n, t.tolist()) for n, t in weights_iterator)

    digests = tensor_digests(new)
    assert Worker().rtrl_update_weights(str(new), ["b.weight"], digests) == {"loaded": ["b.weight"],
                                                                              "mismatched": []}
    assert loaded == [("b.weight", [3.0, 5.0])] and model.head.quant_method.processed == [model.head]
    loaded.clear()
    bad = dict(digests, **{"b.weight": digests["a.weight"]})
    assert Worker().rtrl_update_weights(str(new), ["b.weight"], bad) == {"loaded": [], "mismatched": ["b.weight"]}
    assert loaded == []


class _Llm:
    """vLLM's AsyncLLM as VllmEngine.reload calls it: the worker calls it makes, recorded."""

    def __init__(self):
        self.calls = []

    async def collective_rpc(self, method, kwargs):
        self.calls.append(method)
        return [{"loaded": kwargs["changed"], "mismatched": []}] if method == "rtrl_update_weights" else [[]]

    async def reset_prefix_cache(self):
        return True


def test_an_engine_whose_folder_was_evicted_still_reloads_a_version_of_its_architecture(tmp_path):
    """Retention evicts a rejected candidate's cached copy while its engine, unstaged, waits as a spare: the
    reload compares against what the engine kept in memory, not the folder."""
    import asyncio
    import shutil

    from serving.config import ServingConfig
    from serving.engine import VllmEngine
    from serving.testing import make_tiny_checkpoint

    old = make_tiny_checkpoint(tmp_path / "served-v5", seed=0)
    new = make_tiny_checkpoint(tmp_path / "served-v6", seed=1)
    engine = VllmEngine("5", old, _Llm(), None, ServingConfig())
    shutil.rmtree(old)
    asyncio.run(engine.reload("6", new))
    assert engine.version == "6" and engine.llm.calls == ["rtrl_reload_weights"]   # no digests: every tensor
    other = make_tiny_checkpoint(tmp_path / "other", seed=2, hidden=128)
    with pytest.raises(ValueError, match="another architecture"):
        asyncio.run(engine.reload("7", other))
