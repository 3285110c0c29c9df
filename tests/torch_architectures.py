"""Small seeded models built by timm, torchvision, transformers and torch.nn, and their exports.

The real-architecture suite (``tests/test_torch_architectures.py``) exports these with both
exporters and hands this file to ``onnxmon reference torch --factory FILE:make_<name>``; a factory
called in the reference's child process builds exactly the module that was exported, because each
is seeded and no weights are downloaded (random initialisation, BatchNorm statistics from seeded
batches). Configs are tiny so that the whole suite runs in minutes on two CPU cores:

- ``cnn``: torchvision's ``mobilenet_v3_small`` (BatchNorm, Hardswish, squeeze-excite, a Dropout
  in its classifier), 10 classes, ``image`` [batch, 3, 32, 32].
- ``vit``: timm's ``VisionTransformer`` (patch 8, width 32, 2 blocks), ``image`` [batch, 3, 32, 32].
- ``bert``: transformers' ``BertModel`` (2 layers, width 32, dropout 0.1), ``input_ids`` int64
  [batch, seq], its last hidden state out.
- ``gpt2``: transformers' ``GPT2LMHeadModel`` (2 layers, width 32, no cache), ``input_ids`` int64
  [batch, seq], its logits out.
- ``rnn``: a tagger of ``nn.LSTM`` then ``nn.GRU`` and a Linear, ``features`` [batch, seq, 16].
- ``seg``: torchvision's LRASPP segmenter on a ``mobilenet_v3_small`` backbone (its head upsamples
  with bilinear ``F.interpolate(align_corners=False)``: ONNX Resizes), 3 classes, ``image``
  [batch, 3, 32, 32].

``baked`` variants reproduce the classic shape mistakes in user code around a library model: the
rnn tagger flattening its tags with the example's batch size (``reshape(2, -1)``: a baked batch) and
the bert encoder reshaping its output with the example's sequence length (a baked sequence).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

EXAMPLE_BATCH = 2
SEQ = 12
VOCAB = 64
# name -> (input name, output name, example shape, dtype, dynamic dims)
SPECS: dict[str, tuple[str, str, tuple[int, ...], torch.dtype, tuple[str, ...]]] = {
    "cnn": ("image", "logits", (EXAMPLE_BATCH, 3, 32, 32), torch.float32, ("batch",)),
    "vit": ("image", "logits", (EXAMPLE_BATCH, 3, 32, 32), torch.float32, ("batch",)),
    "bert": ("input_ids", "hidden", (EXAMPLE_BATCH, SEQ), torch.int64, ("batch", "seq")),
    "gpt2": ("input_ids", "logits", (EXAMPLE_BATCH, SEQ), torch.int64, ("batch", "seq")),
    "rnn": ("features", "tags", (EXAMPLE_BATCH, SEQ, 16), torch.float32, ("batch", "seq")),
    "seg": ("image", "mask", (EXAMPLE_BATCH, 3, 32, 32), torch.float32, ("batch",)),
}


def _warm_batchnorms(module: nn.Module, shape: tuple[int, ...]) -> nn.Module:
    """Give every BatchNorm non-trivial running statistics from a few seeded batches, then eval()."""
    module.train()
    with torch.no_grad():
        for _ in range(3):
            module(torch.randn(8, *shape[1:]) * 1.5 + 0.3)
    return module.eval()


class _Out(nn.Module):
    """A library model under a named single input, returning one tensor (its dict's entry, or its logits)."""

    def __init__(self, model: nn.Module, key: str | None = None) -> None:
        super().__init__()
        self.model = model
        self.key = key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x)
        return out if self.key is None else out[self.key]


def make_cnn() -> nn.Module:
    from torchvision.models import mobilenet_v3_small

    torch.manual_seed(0)
    return _warm_batchnorms(mobilenet_v3_small(num_classes=10), SPECS["cnn"][2])


def make_vit() -> nn.Module:
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(1)
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.0,
                            num_classes=10)  # fmt: skip
    return vit.eval()


def make_seg() -> nn.Module:
    from torchvision.models import mobilenet_v3_small
    from torchvision.models.segmentation.lraspp import _lraspp_mobilenetv3

    torch.manual_seed(2)  # torchvision's LRASPP builder, on the small backbone (its public one is the large)
    seg = _lraspp_mobilenetv3(mobilenet_v3_small(dilated=True), num_classes=3)
    return _warm_batchnorms(_Out(seg, "out"), SPECS["seg"][2])


class _Bert(nn.Module):
    def __init__(self, baked_seq: int | None = None) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=64, attn_implementation="eager")  # fmt: skip
        self.bert = BertModel(config, add_pooling_layer=False)
        self.baked_seq = baked_seq

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids).last_hidden_state
        if self.baked_seq is not None:  # the mistake: the example's sequence length as a constant
            hidden = hidden.reshape(-1, self.baked_seq, 32)
        return hidden


def make_bert() -> nn.Module:
    torch.manual_seed(3)
    return _Bert().eval()


def make_bert_baked() -> nn.Module:
    torch.manual_seed(3)
    return _Bert(baked_seq=SEQ).eval()


class _Gpt2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, use_cache=False,
                            bos_token_id=0, eos_token_id=0, attn_implementation="eager")  # fmt: skip
        self.gpt2 = GPT2LMHeadModel(config)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # A mask, as a caller passes one: without it transformers looks for packed sequences with
        # torch.diff, which the legacy exporter cannot export (aten::diff).
        return self.gpt2(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False).logits


def make_gpt2() -> nn.Module:
    torch.manual_seed(4)
    return _Gpt2().eval()


class _Tagger(nn.Module):
    def __init__(self, baked_batch: int | None = None) -> None:
        super().__init__()
        self.lstm = nn.LSTM(16, 32, batch_first=True)
        self.gru = nn.GRU(32, 32, batch_first=True)
        self.head = nn.Linear(32, 5)
        self.baked_batch = baked_batch

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        y, _ = self.gru(self.lstm(features)[0])
        if self.baked_batch is not None:  # the mistake: the example's batch size as a constant
            return self.head(y).reshape(self.baked_batch, -1)  # one row of tags per sequence
        return self.head(y)


def make_rnn() -> nn.Module:
    torch.manual_seed(5)
    return _Tagger().eval()


def make_rnn_baked() -> nn.Module:
    torch.manual_seed(5)
    return _Tagger(baked_batch=EXAMPLE_BATCH).eval()


def make(name: str) -> nn.Module:
    """The factory ``make_<name>`` of this file (``bert_baked``, ``rnn_baked`` included)."""
    factory: Any = globals()[f"make_{name}"]
    return factory()  # type: ignore[no-any-return]


def example(name: str, seed: int = 0) -> torch.Tensor:
    """An example input of model ``name`` (token ids below the vocabulary for the text models)."""
    _, _, shape, dtype, _ = SPECS[name.removesuffix("_baked")]
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.int64:
        return torch.randint(0, VOCAB, shape, generator=generator)
    return torch.randn(shape, generator=generator)


def export(path: Path, name: str, exporter: str, *, train: bool = False) -> Path:
    """Export model ``name`` with ``exporter`` (legacy | dynamo) to ``path``, its batch (and seq) dims dynamic."""
    base = name.removesuffix("_baked")
    input_name, output_name, _, _, dims = SPECS[base]
    module = make(name)
    module.train(train)  # the mistake under test: BatchNorm on batch statistics, Dropout on
    args = (example(name),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "legacy":
            axes = dict(enumerate(dims))
            mode = torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.EVAL
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=17, input_names=[input_name],
                              output_names=[output_name], dynamic_axes={input_name: axes, output_name: {0: "batch"}},
                              training=mode, do_constant_folding=not train)  # fmt: skip
        else:
            shapes = ({i: torch.export.Dim(d, min=1, max=64) for i, d in enumerate(dims)},)  # forward's argument
            torch.onnx.export(module, args, str(path), dynamo=True, opset_version=18, input_names=[input_name],
                              output_names=[output_name], dynamic_shapes=shapes, external_data=False)  # fmt: skip
    return path
