"""The labels of ``onnxmon_runtime_info``: the ONNX Runtime, CUDA, driver and GPU a run saw, and its node.

Read from an environment snapshot (``EnvSnapshot.to_dict`` form), so the exporter says exactly what
the stored run recorded; nothing here imports ``prometheus_client``. ``docs/metrics.md`` lists them.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from typing import Any

from monitor.config.identity import identity

RUNTIME_LABELS = (
    "onnxruntime_version",
    "onnxruntime_package",
    "cuda_version",
    "cudnn_version",
    "driver_version",
    "gpu_name",
    "node",
)


def runtime_labels(snapshot: Mapping[str, Any] | None) -> dict[str, str]:
    """Labels of ``onnxmon_runtime_info`` from a snapshot in ``EnvSnapshot.to_dict`` form.

    Several GPUs of different models are joined sorted with ``,``; CUDA, cuDNN, driver and GPU
    are ``""`` on a CPU-only host. ``node`` is ``k8s.node``, else ``ONNXMON_NODE_NAME``, else the host name.
    """
    fields = _fields(snapshot)

    def text(name: str) -> str:
        value = fields.get(name)
        return "" if value is None else str(value)

    gpus = sorted({str(v) for k, v in fields.items() if k.startswith("gpu.") and k.endswith(".name") and v})
    node = text("k8s.node") or identity().node or text("host.name") or platform.node()
    return {
        "onnxruntime_version": text("onnxruntime.version"),
        "onnxruntime_package": text("onnxruntime.package"),
        "cuda_version": text("cuda.runtime.version"),
        "cudnn_version": text("cuda.cudnn.version"),
        "driver_version": text("nvml.driver_version"),
        "gpu_name": ",".join(gpus),
        "node": node,
    }


def _fields(snapshot: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{name: value}`` of a snapshot dict; tolerates a flat mapping without ``fields``."""
    if not snapshot:
        return {}
    raw = snapshot.get("fields")
    if isinstance(raw, Mapping):
        return {name: (f.get("value") if isinstance(f, Mapping) else f) for name, f in raw.items()}
    return {k: v for k, v in snapshot.items() if k not in ("fingerprint", "schema", "captured_at")}
