"""A factory whose PyTorch side feeds the channels in BGR order: the input check names it.

``make_inputs(sample)`` is the PyTorch side's own preprocessing: it gets each benchmark sample (ONNX
input name -> numpy array, what ONNX Runtime is fed) and returns what the module is called with.
"""

from __future__ import annotations

import numpy as np
import torch
from models import make_cnn as make_model

__all__ = ["make_inputs", "make_model"]


def make_inputs(sample: dict[str, np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(sample["image"][:, ::-1]))
