"""Pure helpers behind the metrics: the values ``/metrics`` exports, computed from plain records.

Nothing here imports ``prometheus_client``: these functions turn results, stored runs, the config
and files on disk into numbers and label values, so they can be tested (and reused by the log
sink and the API) without a registry. ``docs/metrics.md`` is the contract they implement.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from monitor.results import AppliedTolerance, CheckResult, OutputMetrics, Reason, Verdict

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


class OutputLike(Protocol):
    """What an ``OutputStats`` and a stored ``OutputRecord`` have in common."""

    @property
    def name(self) -> str: ...
    @property
    def verdict(self) -> Verdict: ...
    @property
    def metrics(self) -> OutputMetrics: ...
    @property
    def tolerance(self) -> AppliedTolerance: ...
    @property
    def reasons(self) -> tuple[Reason, ...]: ...
    @property
    def dtype(self) -> str: ...


def primary_reason(result: CheckResult) -> str:
    """The first reason code of a non-passing result (check-level first), ``internal_error`` if none."""
    reasons = result.all_reasons()
    return reasons[0].code if reasons else "internal_error"


def is_measured(output: OutputLike) -> bool:
    """True when the output was compared (verdict pass or fail), so its numbers mean something."""
    return output.verdict is not Verdict.ERROR


def error_ratio(output: OutputLike) -> float:
    """Worst error ÷ tolerance: max over elements of ``|a-b| / (atol + rtol*|b|)`` (docs/metrics.md).

    The exact value needs every element, so it is taken from ``OutputMetrics.error_ratio`` when
    the comparison provides it. Without it the value is still exact in these cases: a NaN/Inf
    position mismatch or a differing integer element (+Inf), no difference at all (0), and
    ``rtol == 0`` (``max_abs_error / atol``). Otherwise ``max_abs_error`` alone cannot tell which
    element had which ``|b|``, and the result is NaN rather than a guess.
    """
    exact = getattr(output.metrics, "error_ratio", None)
    if exact is not None:
        return float(exact)
    metrics, tolerance = output.metrics, output.tolerance
    if not is_measured(output):
        return NAN
    if metrics.nan_mismatch_count or metrics.inf_mismatch_count:
        return math.inf
    if not _is_float_dtype(output.dtype):
        return 0.0 if metrics.mismatch_count == 0 else math.inf
    if metrics.max_abs_error == 0.0:
        return 0.0
    if tolerance.rtol == 0.0:
        return metrics.max_abs_error / tolerance.atol if tolerance.atol > 0 else math.inf
    return NAN


def _is_float_dtype(dtype: str) -> bool:
    return not dtype or "float" in dtype


def nondeterministic(output: OutputLike) -> float:
    """1.0 when the check judged the repeats to disagree (reason ``nondeterministic``), else 0.0."""
    return 1.0 if any(r.code == "nondeterministic" for r in output.reasons) else 0.0


def provider_fallback(requested: Iterable[str], effective: Iterable[str], reasons: Iterable[Reason]) -> float | None:
    """1.0/0.0 for a run that created a session; ``None`` when it made none (nothing to say)."""
    effective = tuple(effective)
    if not effective:
        return None
    missing = set(requested) - set(effective)
    return 1.0 if missing or any(r.code == "provider_fallback" for r in reasons) else 0.0


def worst_output(outputs: Iterable[OutputLike]) -> OutputLike | None:
    """The output furthest from its line: failing before passing, then by ``max_abs_error / atol``."""

    def key(output: OutputLike) -> tuple[int, float]:
        atol = output.tolerance.atol
        error = output.metrics.max_abs_error
        ratio = error / atol if atol > 0 else (math.inf if error > 0 else 0.0)
        return ({Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.ERROR: 2}[output.verdict], ratio)

    return max(outputs, key=key, default=None)


def finite_or_nan(value: float | None) -> float:
    return NAN if value is None else float(value)


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


def file_signature(path: Path) -> tuple[int, int] | None:
    """(mtime_ns, size) of a file, None when it cannot be stat'ed: cheap change detection."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


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
    node = text("k8s.node") or os.environ.get("ONNXMON_NODE_NAME", "") or text("host.name") or platform.node()
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


def fingerprint_of(snapshot: Mapping[str, Any] | None) -> str | None:
    value = snapshot.get("fingerprint") if snapshot else None
    return str(value) if value else None
