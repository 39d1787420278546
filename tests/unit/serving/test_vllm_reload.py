"""serving.vllm_reload: which layers a reload must re-process besides those the checkpoint loads (tied weights)."""

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
