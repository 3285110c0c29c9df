"""The PyTorch side of the "Verify a PyTorch export" walkthrough (docs/pytorch.md) and its tests.

Two tiny models, built deterministically (seeded), so that a factory called in another process
returns exactly the module that was exported:

- ``make_cnn``: a ResNet-like CNN: a Conv+BatchNorm+ReLU stem (a ``Sequential``), two residual
  blocks (the second strided, with a 1x1 projection), an ``nn.Upsample`` (bilinear), global
  average pooling and a Linear head with a softmax; input ``image`` float32 [batch, 3, 32, 32].
  Its BatchNorms get running statistics from a few seeded batches, so they are not the trivial
  0/1 of a fresh module.
- ``make_encoder``: an ``nn.TransformerEncoderLayer`` (d_model 32, 4 heads, dropout 0.1); input
  ``embeddings`` float32 [batch, seq, 32].

``export`` writes either one with the legacy (TorchScript) or the dynamo exporter, in ``eval()``
mode or, to show the classic mistake, in training mode. Run as a script:

    python examples/torch/models.py OUT.onnx [--model cnn|encoder] [--exporter legacy|dynamo] [--train]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """A basic ResNet block: conv-bn-relu-conv-bn plus the (projected when strided) input."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.skip(x))


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.block1 = Block(8, 8, stride=1)
        self.block2 = Block(8, 16, stride=2)
        self.up = nn.Upsample(scale_factor=2.0, mode="bilinear", align_corners=False)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, classes)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.up(self.block2(self.block1(self.stem(image))))
        return self.softmax(self.head(torch.flatten(self.pool(x), 1)))


class Encoder(nn.Module):
    """The layer under a named argument, so the exported input is called ``embeddings``."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            d_model=32, nhead=4, dim_feedforward=64, dropout=0.1, activation="gelu", batch_first=True
        )

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        return self.layer(embeddings)


def make_cnn() -> nn.Module:
    """The CNN in eval mode, the same weights every call."""
    torch.manual_seed(0)
    cnn = SmallCNN()
    cnn.train()
    with torch.no_grad():
        for _ in range(4):  # seeded batches give BatchNorm non-trivial running stats
            cnn(torch.randn(8, 3, 32, 32) * 1.5 + 0.3)
        cnn.head.weight *= 8.0  # logits of a few units, so the softmax is not near-uniform
    return cnn.eval()


def make_encoder() -> nn.Module:
    """The encoder block in eval mode, the same weights every call."""
    torch.manual_seed(1)
    return Encoder().eval()


def export(path: Path, *, model: str = "cnn", exporter: str = "legacy", train: bool = False) -> Path:
    """Export ``model`` to ``path`` with a dynamic batch axis (and seq axis for the encoder)."""
    module = make_cnn() if model == "cnn" else make_encoder()
    name = "image" if model == "cnn" else "embeddings"
    out = "probs" if model == "cnn" else "encoded"
    example = torch.randn(2, 3, 32, 32) if model == "cnn" else torch.randn(2, 12, 32)
    if train:
        module.train()  # the mistake: BatchNorm on batch statistics, Dropout on
    if exporter == "legacy":
        axes = {0: "batch"} if model == "cnn" else {0: "batch", 1: "seq"}
        torch.onnx.export(
            module,
            (example,),
            str(path),
            dynamo=False,
            opset_version=17,
            input_names=[name],
            output_names=[out],
            dynamic_axes={name: axes, out: {0: "batch"} if model == "cnn" else axes},
            training=torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.EVAL,
            do_constant_folding=not train,
        )
    else:
        batch = torch.export.Dim("batch", min=1, max=1024)
        shapes = {name: {0: batch}} if model == "cnn" else {name: {0: batch, 1: torch.export.Dim("seq", max=4096)}}
        torch.onnx.export(
            module,
            (example,),
            str(path),
            dynamo=True,
            opset_version=18,
            input_names=[name],
            output_names=[out],
            dynamic_shapes=shapes,
            external_data=False,
        )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--model", choices=("cnn", "encoder"), default="cnn")
    parser.add_argument("--exporter", choices=("legacy", "dynamo"), default="legacy")
    parser.add_argument("--train", action="store_true", help="export in training mode (the mistake)")
    args = parser.parse_args()
    print(export(args.path, model=args.model, exporter=args.exporter, train=args.train))


if __name__ == "__main__":
    main()
