"""The values a check produces: verdicts, per-output statistics and the check result.

Everything here is a frozen dataclass built from the standard library only, so sinks,
the store and the API can consume results without importing numpy or ONNX Runtime.
Values answer ``bool()``: ``if stats:`` means "within tolerance" while the numbers stay
attached for metrics and reports (a habit borrowed from Polygraphy's compare results).

``OutputStats`` is the one record of an output's comparison: a check produces it and the store
reads it back from its rows, so the figures derived from it (``error_ratio``, ``atol_ratio``,
``is_measured``, ``worst_output``) live here once, for the metrics, the log sink, the API and
the pages alike.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


class Verdict(enum.StrEnum):
    """Outcome of a check: numbers agree, numbers drifted, or numbers could not be measured."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"

    @staticmethod
    def worst(verdicts: Iterable[Verdict]) -> Verdict:
        """The most severe verdict (error > fail > pass); ``pass`` for an empty input."""
        return max(verdicts, key=_SEVERITY.__getitem__, default=Verdict.PASS)

    @property
    def severity(self) -> int:
        """0 for pass, 1 for fail, 2 for error: the order in which outputs and runs are ranked."""
        return _SEVERITY[self]


_SEVERITY = {Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.ERROR: 2}


# Machine-readable reason codes. The set is closed so that Prometheus labels stay bounded;
# the human detail travels next to the code in ``Reason.detail``.
REASON_CODES: frozenset[str] = frozenset(
    {
        # drift (verdict fail)
        "atol_rtol",  # element-wise |a-b| <= atol + rtol*|b| violated beyond max_mismatch_ratio
        "cosine",  # cosine similarity under cosine_min
        "snr",  # signal-to-noise ratio under snr_min_db
        "topk",  # top-k agreement under min_agreement
        "nan_mismatch",  # NaN where the baseline has none (or the other way round)
        "inf_mismatch",  # +-Inf where the baseline has none, or with the other sign
        "exact_mismatch",  # integer / bool output differs
        "nondeterministic",  # repeats of one sample disagree with each other
        "provider_fallback",  # a requested execution provider is not in use
        "model_changed",  # the model file hash differs from the baseline's
        "benchset_changed",  # the benchmark set hash differs from the baseline's
        "batch_variant",  # checks.batch_invariance: a batched run differs from single-sample runs
        "input_mismatch",  # a PyTorch reference consumed other inputs than the benchmark set (described)
        # could not measure (verdict error)
        "shape_changed",
        "dtype_changed",  # a float output that became another float dtype is measured and fails instead
        "missing_output",
        "model_error",  # model missing / unloadable / inputs do not fit
        "benchset_error",
        "baseline_error",
        "no_baseline",
        "config_error",
        "run_error",  # ONNX Runtime raised during Run()
        "timeout",
        "crash",
        "internal_error",
    }
)


# Causes of a drift that ``onnxmon diagnose`` names (docs/diagnose.md). Closed, like the reason
# codes, so that ``onnxmon_diagnosis_info{cause}`` stays bounded and incidents compare by code.
CAUSE_CODES: frozenset[str] = frozenset(
    {
        "model_weights_changed",  # same graph, other initializer values
        "model_precision_changed",  # float32 -> float16 / bfloat16 (or back)
        "model_quantized",  # QDQ / integer operators where the baseline's model had floats
        "model_structure_changed",  # nodes, ops or wiring differ
        "benchset_changed",  # the inputs are not the baseline's
        "input_mismatch",  # the model was fed other inputs than the baseline's (channel order, scale, cast)
        "session_settings_changed",  # a session or provider option differs from the baseline's
        "graph_optimization",  # the graph optimization level (fusions, layout passes) moves the numbers
        "thread_count",  # reduction order depends on the number of threads
        "execution_provider_fallback",  # another execution provider runs the model
        "runtime_version",  # another ONNX Runtime release
        "gpu_library_version",  # CUDA, cuDNN, cuBLAS or TensorRT changed
        "driver_or_gpu_changed",  # another GPU kind or driver
        "tf32",  # TF32 math in GEMM / convolutions
        "conv_algorithm",  # cuDNN convolution algorithm choice
        "nondeterminism",  # repeats of the same run disagree
        "cpu_isa",  # MLAS kernels dispatched by another CPU instruction set
        "gpu_throttling",  # clocks held down by temperature or power
        # the export computes something else than the framework's model (lint errors, against a reference)
        "export_training_mode",  # BatchNormalization / Dropout left in training mode
        "export_resize_mode",  # a Resize coordinate / interpolation mode unlike the framework's
        "export_baked_shape",  # a batch or other dim baked into a Reshape / Expand constant
        "unknown",
    }
)


@dataclass(frozen=True)
class Reason:
    """Why a verdict is not ``pass``: a bounded ``code`` plus a human ``detail``."""

    code: str
    detail: str = ""
    output: str | None = None

    def __post_init__(self) -> None:
        if self.code not in REASON_CODES:
            raise ValueError(f"unknown reason code {self.code!r}; known: {sorted(REASON_CODES)}")

    def __str__(self) -> str:
        where = f"[{self.output}] " if self.output else ""
        return f"{where}{self.code}: {self.detail}" if self.detail else f"{where}{self.code}"


@dataclass(frozen=True)
class OutputMetrics:
    """Every metric of one output over all samples, computed in float64.

    Error metrics are ``actual - expected`` where ``expected`` is the baseline. ``None``
    means "not applicable" (e.g. ULP distance of an integer output, top-k when not asked).
    """

    element_count: int = 0
    max_abs_error: float = 0.0
    mean_abs_error: float = 0.0
    rms_error: float = 0.0
    max_rel_error: float = 0.0
    p99_abs_error: float = 0.0
    cosine_similarity: float = 1.0
    snr_db: float = math.inf
    max_ulp: int | None = None
    mismatch_count: int = 0
    mismatch_ratio: float = 0.0
    nan_count: int = 0
    nan_mismatch_count: int = 0
    inf_count: int = 0
    inf_mismatch_count: int = 0
    bitwise_equal: bool = True
    topk_agreement: float | None = None
    nondeterminism_max_abs: float | None = None
    error_ratio: float | None = None  # max over elements of |a-b| / (atol + rtol*|b|): 1.0 is the line

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class AppliedTolerance:
    """The concrete thresholds one output was judged against (after defaults/overrides merge)."""

    atol: float
    rtol: float
    cosine_min: float | None = None
    snr_min_db: float | None = None
    max_mismatch_ratio: float = 0.0
    topk_k: int | None = None
    topk_min_agreement: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class OutputStats:
    """Comparison of one named output with its baseline; truthy when within tolerance.

    The same value whether it comes fresh from a check or back from the store (``Store.run``,
    ``Store.latest_per_model``), so every consumer reads one type.
    """

    name: str
    verdict: Verdict
    metrics: OutputMetrics
    tolerance: AppliedTolerance
    reasons: tuple[Reason, ...] = ()
    dtype: str = ""
    shape: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return self.verdict is Verdict.PASS

    @property
    def is_measured(self) -> bool:
        """True when the output was compared (verdict pass or fail), so its numbers mean something."""
        return self.verdict is not Verdict.ERROR

    @property
    def is_nondeterministic(self) -> bool:
        """True when the check judged the repeats of a sample to disagree (reason ``nondeterministic``)."""
        return any(r.code == "nondeterministic" for r in self.reasons)

    @property
    def error_ratio(self) -> float:
        """Worst error ÷ tolerance: max over elements of ``|a-b| / (atol + rtol*|b|)`` (docs/metrics.md).

        The exact value needs every element, so it is taken from ``OutputMetrics.error_ratio`` when
        the comparison provides it. Without it the value is still exact in these cases: a NaN/Inf
        position mismatch or a differing integer element (+Inf), no difference at all (0), and
        ``rtol == 0`` (``max_abs_error / atol``). Otherwise ``max_abs_error`` alone cannot tell which
        element had which ``|b|``, and the result is NaN rather than a guess.
        """
        metrics, tolerance = self.metrics, self.tolerance
        if metrics.error_ratio is not None:
            return float(metrics.error_ratio)
        if not self.is_measured:
            return math.nan
        if metrics.nan_mismatch_count or metrics.inf_mismatch_count:
            return math.inf
        if self.dtype and "float" not in self.dtype:
            return 0.0 if metrics.mismatch_count == 0 else math.inf
        if metrics.max_abs_error == 0.0:
            return 0.0
        if tolerance.rtol == 0.0:
            return metrics.max_abs_error / tolerance.atol if tolerance.atol > 0 else math.inf
        return math.nan

    @property
    def atol_ratio(self) -> float:
        """``max_abs_error / atol``: inf when atol is 0 and the outputs differ, nan stays nan.

        How many absolute tolerances away the worst element is (``rtol`` adds headroom, so > 1
        alone is not a failure); the store keeps it per run as ``worst_atol_ratio``.
        """
        error, atol = self.metrics.max_abs_error, self.tolerance.atol
        if atol > 0:
            return error / atol
        return 0.0 if error == 0 else math.inf if not math.isnan(error) else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict.value,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "metrics": self.metrics.to_dict(),
            "tolerance": self.tolerance.to_dict(),
            "reasons": [dataclasses.asdict(r) for r in self.reasons],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutputStats:
        """Rebuild an output from ``to_dict`` output."""
        return cls(
            name=data["name"],
            verdict=Verdict(data["verdict"]),
            dtype=data.get("dtype", ""),
            shape=tuple(data.get("shape", ())),
            metrics=OutputMetrics(**data["metrics"]),
            tolerance=AppliedTolerance(**data["tolerance"]),
            reasons=tuple(Reason(**r) for r in data.get("reasons", ())),
        )


def run_error_ratio(ratios: Iterable[float | None]) -> float | None:
    """A run's one "error ÷ tolerance" figure: the largest ``error_ratio`` of its outputs.

    NaN (not knowable) and None (not stored) are skipped while any output has a known value;
    NaN when none has one; None when there are no outputs. The CLI, the API and every page show
    this figure under the one name ``error_ratio`` ("error ÷ tolerance"), as Prometheus exports
    ``onnxmon_output_error_ratio`` per output: 1 is the line.
    """
    seen = [r for r in ratios if r is not None]
    known = [r for r in seen if not math.isnan(r)]
    if known:
        return max(known)
    return math.nan if seen else None


def worst_output(outputs: Iterable[OutputStats]) -> OutputStats | None:
    """The output furthest from its line: most severe verdict first, then the largest atol ratio (nan worst).

    The store records this one as a run's ``worst_output`` and the log line names it.
    """

    def key(output: OutputStats) -> tuple[int, float]:
        ratio = output.atol_ratio
        return output.verdict.severity, math.inf if math.isnan(ratio) else ratio

    return max(outputs, key=key, default=None)


@dataclass(frozen=True)
class CheckResult:
    """One model checked against its active baseline: a frozen value every sink consumes."""

    model: str
    verdict: Verdict
    started_at: float
    finished_at: float
    reasons: tuple[Reason, ...] = ()
    outputs: tuple[OutputStats, ...] = ()
    baseline_id: str | None = None
    model_sha256: str | None = None
    benchset: str | None = None
    benchset_sha256: str | None = None
    providers_requested: tuple[str, ...] = ()
    providers_effective: tuple[str, ...] = ()
    sample_count: int = 0
    timings: Mapping[str, float] = field(default_factory=dict)
    environment: Mapping[str, Any] = field(default_factory=dict)
    attribution: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.verdict is Verdict.PASS

    @property
    def duration_s(self) -> float:
        return self.finished_at - self.started_at

    @property
    def environment_fingerprint(self) -> str | None:
        """The fingerprint of the environment snapshot, as the store records it on the run."""
        value = self.environment.get("fingerprint")
        return str(value) if value else None

    def all_reasons(self) -> tuple[Reason, ...]:
        """Check-level reasons followed by every output's reasons."""
        return self.reasons + tuple(r for o in self.outputs for r in o.reasons)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "verdict": self.verdict.value,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_s": self.duration_s,
            # check-level reasons (model or benchmark set changed, fallback, timeout): a numeric failure lives
            # on its output; all_reasons holds both, each output's named, so a failing run says why at the top
            "reasons": [dataclasses.asdict(r) for r in self.reasons],
            "all_reasons": [dataclasses.asdict(r) for r in self.all_reasons()],
            "outputs": [o.to_dict() for o in self.outputs],
            "baseline_id": self.baseline_id,
            "model_sha256": self.model_sha256,
            "benchset": self.benchset,
            "benchset_sha256": self.benchset_sha256,
            "providers_requested": list(self.providers_requested),
            "providers_effective": list(self.providers_effective),
            "sample_count": self.sample_count,
            "timings": dict(self.timings),
            "environment": dict(self.environment),
            "attribution": self.attribution,
            "details": dict(self.details),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckResult:
        """Rebuild a result from ``to_dict`` output (used across the child-process boundary)."""
        outputs = tuple(OutputStats.from_dict(o) for o in data.get("outputs", ()))
        return cls(
            model=data["model"],
            verdict=Verdict(data["verdict"]),
            started_at=float(data["started_at"]),
            finished_at=float(data["finished_at"]),
            reasons=tuple(Reason(**r) for r in data.get("reasons", ())),
            outputs=outputs,
            baseline_id=data.get("baseline_id"),
            model_sha256=data.get("model_sha256"),
            benchset=data.get("benchset"),
            benchset_sha256=data.get("benchset_sha256"),
            providers_requested=tuple(data.get("providers_requested", ())),
            providers_effective=tuple(data.get("providers_effective", ())),
            sample_count=int(data.get("sample_count", 0)),
            timings=dict(data.get("timings", {})),
            environment=dict(data.get("environment", {})),
            attribution=data.get("attribution"),
            details=dict(data.get("details", {})),
        )


def error_result(model: str, code: str, detail: str, started_at: float, finished_at: float) -> CheckResult:
    """A result with verdict ``error`` for a check that could not measure anything."""
    return CheckResult(
        model=model,
        verdict=Verdict.ERROR,
        started_at=started_at,
        finished_at=finished_at,
        reasons=(Reason(code, detail[:2000]),),
    )
