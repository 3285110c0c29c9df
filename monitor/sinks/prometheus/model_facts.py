"""What ``onnxmon_model_info`` says of a model file: its hash, opset and output names.

Read from disk at most once per file change (the caller keeps the stat stamp); never raises, because
a missing or broken model file is a documented state of the metric (empty labels), not an error of
the exporter. Nothing here imports ``prometheus_client``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelFacts:
    """What ``onnxmon_model_info`` says of a model file; empty strings while it is missing or unreadable."""

    sha256: str = ""
    opset: str = ""
    outputs: tuple[str, ...] = ()


def read_model_facts(path: Path) -> ModelFacts:
    """Hash and header of a model file (never raises: a broken file gives empty facts)."""
    from monitor.files import modelfile

    try:
        identity = modelfile.identify(path)
        import onnx

        proto = onnx.load(str(path), load_external_data=False)
        outputs = tuple(o.name for o in proto.graph.output)
    except Exception:  # missing, unreadable or not ONNX: documented as "" labels
        return ModelFacts()
    return ModelFacts(identity.sha256, "" if identity.opset is None else str(identity.opset), outputs)
