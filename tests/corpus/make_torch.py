"""Make the PyTorch-exported corpus models in ``tests/corpus/torch/`` (run by hand, output committed).

``torch.onnx.export`` is how most neural networks reach ONNX Runtime, and its two exporters
make different graphs from the same module: the legacy TorchScript tracer (``dynamo=False``)
and the torch.export/onnxscript one (``dynamo=True``, the default since torch 2.9). The set,
seeded with ``torch.manual_seed(0)`` and exported in ``eval()`` mode:

- ``cnn_legacy.onnx`` / ``cnn_dynamo.onnx``: a small ResNet-like CNN (Conv+BatchNorm+ReLU stem,
  two residual blocks, the second strided with a 1x1 projection, a bilinear upsample, global
  average pooling, a Linear head with softmax); input ``image`` float32 [batch, 3, 32, 32].
  The BatchNorm running statistics come from a few seeded batches in ``train()`` mode, so they
  are not the trivial 0/1 of a fresh module, and the head's weights are scaled up so the
  probabilities are not all near 1/10 (both exporters fold the BatchNorms into the convs);
- ``encoder_dynamo.onnx``: an ``nn.TransformerEncoderLayer`` (d_model 32, 4 heads, feed-forward
  64, GELU), input ``embeddings`` float32 [batch, seq, 32].

Every input has a dynamic batch axis (and the encoder a dynamic seq axis). Each file is checked
against torch in ONNX Runtime (max abs difference printed, at most 1e-4). Torch is not a
project dependency; use a throwaway venv (torch 2.13.0 CPU):

    python3 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install torch==2.13.0 onnx onnxscript onnxruntime numpy
    /tmp/torchvenv/bin/python tests/corpus/make_torch.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
from torch import nn

OUT = Path(__file__).resolve().parent / "torch"
TOLERANCE = 1e-4


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


class SmallResNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.block1 = Block(8, 8, stride=1)
        self.block2 = Block(8, 16, stride=2)
        self.head = nn.Linear(16, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.block2(self.block1(self.stem(image)))
        x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
        x = x.mean(dim=(2, 3))
        return torch.softmax(self.head(x), dim=-1)


def main() -> None:
    OUT.mkdir(exist_ok=True)
    torch.manual_seed(0)
    cnn = SmallResNet()
    cnn.train()
    with torch.no_grad():
        for _ in range(4):  # seeded batches give BatchNorm non-trivial running stats
            cnn(torch.randn(8, 3, 32, 32) * 1.5 + 0.3)
        cnn.head.weight *= 8.0  # logits of a few units, so the softmax is not near-uniform
    cnn.eval()
    image = torch.randn(2, 3, 32, 32)

    torch.onnx.export(
        cnn,
        (image,),
        str(OUT / "cnn_legacy.onnx"),
        dynamo=False,
        opset_version=17,
        input_names=["image"],
        output_names=["probs"],
        dynamic_axes={"image": {0: "batch"}, "probs": {0: "batch"}},
    )
    verify(cnn, "cnn_legacy.onnx", {"image": image}, [torch.randn(5, 3, 32, 32)])

    batch = torch.export.Dim("batch", min=1, max=1024)
    torch.onnx.export(
        cnn,
        (image,),
        str(OUT / "cnn_dynamo.onnx"),
        dynamo=True,
        opset_version=18,
        input_names=["image"],
        output_names=["probs"],
        dynamic_shapes={"image": {0: batch}},
        external_data=False,
    )
    verify(cnn, "cnn_dynamo.onnx", {"image": image}, [torch.randn(5, 3, 32, 32)])

    encoder = nn.TransformerEncoderLayer(
        d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, activation="gelu", batch_first=True
    )
    encoder.eval()
    embeddings = torch.randn(2, 12, 32)
    seq = torch.export.Dim("seq", min=2, max=4096)
    torch.onnx.export(
        Encoder(encoder).eval(),
        (embeddings,),
        str(OUT / "encoder_dynamo.onnx"),
        dynamo=True,
        opset_version=18,
        input_names=["embeddings"],
        output_names=["encoded"],
        dynamic_shapes={"embeddings": {0: batch, 1: seq}},
        external_data=False,
    )
    verify(Encoder(encoder).eval(), "encoder_dynamo.onnx", {"embeddings": embeddings}, [torch.randn(3, 7, 32)])


class Encoder(nn.Module):
    """The layer under a named argument, so the exported input is called ``embeddings``."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        return self.layer(embeddings)


def verify(module: nn.Module, name: str, feeds: dict[str, torch.Tensor], more: list[torch.Tensor]) -> None:
    """Load the file in ONNX Runtime and hold its output against torch's, at the export shape and
    at another one (the dynamic axes really are dynamic)."""
    path = OUT / name
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (input_name,) = feeds
    worst = 0.0
    for x in [feeds[input_name], *more]:
        with torch.no_grad():
            want = module(x).numpy()
        (got,) = session.run(None, {input_name: x.numpy()})
        assert got.shape == want.shape and got.dtype == want.dtype, (name, got.shape, want.shape)
        worst = max(worst, float(np.max(np.abs(got - want))))
    print(f"{path}: {path.stat().st_size} bytes, torch vs onnxruntime max abs diff {worst:.3g}")
    assert worst <= TOLERANCE, (name, worst)


if __name__ == "__main__":
    main()
