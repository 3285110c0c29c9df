"""Pure helpers behind the metrics: the label values and run-level figures ``/metrics`` exports.

Nothing here imports ``prometheus_client``: these functions turn results, stored runs, the config
and files on disk into numbers and label values, so they can be tested without a registry.
``docs/metrics.md`` is the contract they implement. Figures of one output (``error_ratio``,
``is_measured``, ...) are not here: they belong to ``monitor.results.OutputStats``, which the log
sink, the API and the pages read too.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor.config.identity import identity
from monitor.results import CheckResult, Reason

NAN = math.nan
RUNTIME_LABELS = (
    "onnxruntime_version",
    "onnxruntime_package",
    "cuda_version",
    "cudnn_version",
    "driver_version",
    "gpu_name",
    "node",
)
# BaselineMeta.source -> the documented ``source`` label of onnxmon_baseline_info.
_SOURCE_LABELS = {"captured": "capture", "reference": "capture", "imported": "import", "auto": "auto"}


def primary_reason(result: CheckResult) -> str:
    """The first reason code of a non-passing result (check-level first), ``internal_error`` if none."""
    reasons = result.all_reasons()
    return reasons[0].code if reasons else "internal_error"


def provider_fallback(requested: Iterable[str], effective: Iterable[str], reasons: Iterable[Reason]) -> float | None:
    """1.0/0.0 for a run that created a session; ``None`` when it made none (nothing to say)."""
    effective = tuple(effective)
    if not effective:
        return None
    missing = set(requested) - set(effective)
    return 1.0 if missing or any(r.code == "provider_fallback" for r in reasons) else 0.0


# --- configuration --------------------------------------------------------------------------------


# --- files on disk --------------------------------------------------------------------------------


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


def baseline_source_label(source: str | None) -> str:
    """The documented ``source`` label (``capture``, ``auto``, ``import``) for a baseline's source."""
    if source is None:
        return "none"
    return _SOURCE_LABELS.get(source, source if source in {"capture", "import"} else "capture")


# --- environment ---------------------------------------------------------------------------------


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
