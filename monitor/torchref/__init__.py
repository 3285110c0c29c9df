"""PyTorch references: the model's own PyTorch module as the baseline an ONNX export is checked against.

``reference_torch(plan, "models.py:make_model", intermediates=True)`` runs the user's factory over
the model's benchmark set and stores its outputs (and, mapped to ONNX tensor names, its layers'
outputs) as a ``reference`` baseline; ``onnxmon check`` and ``onnxmon localize`` then compare ONNX
Runtime with PyTorch. ``torch`` is imported only inside this package and only when a factory is
loaded, so onnxmon works without it (``pip install -e '.[torch]'`` in the clone adds it).
"""

from __future__ import annotations

from monitor.torchref.reference import TorchReference, reference_torch

__all__ = ["TorchReference", "reference_torch"]
