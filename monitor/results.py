"""The values a check produces: verdicts, per-output statistics and the check result.

Frozen dataclasses of the standard library only, so sinks, the store and the API consume results
without numpy or ONNX Runtime. Values answer ``bool()``: ``if stats:`` means "within tolerance".
``OutputStats`` is the one record of an output's comparison, fresh from a check or read back from
the store, so the figures derived from it (``error_ratio``, ``atol_ratio``, ``is_measured``,
``worst_output``) live here once.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from monitor import shapes
from monitor.details import Details, EnvironmentSnapshot


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


# Machine-readable reason codes, a closed set (bounded Prometheus labels); the human detail is ``Reason.detail``.
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
        "concurrency_variant",  # checks.concurrency: an answer from threads at once differs bitwise from the serial one
        "input_mismatch",  # a PyTorch reference consumed other inputs than the benchmark set (described)
        "calibration_out_of_range",  # checks.calibration_coverage: a quantized tensor clips too many values
        "decision_changed",  # models[].decisions: more decisions differ than tolerance.max_decision_flip_ratio
        "serving_drift",  # models[].endpoint: the local session matches the baseline, the served model does not
        "endpoint_cached",  # models[].endpoint: a response cache answers instead of the model (nonce-varied twin)
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
        # models[].endpoint could not be measured (monitor/serving/client.py)
        "endpoint_unreachable",  # refused, no route, no such host
        "endpoint_timeout",  # no answer within endpoint.timeout_s
        "endpoint_status",  # an HTTP or gRPC error status (500, NOT_FOUND, ...)
        "endpoint_dtype",  # an output answered in another datatype than the model produces
        "endpoint_shape",  # an output whose data does not fill its shape, or another shape than the model's
        "endpoint_answer",  # an output missing from the answer
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
        "model_requantized",  # same QDQ graph, other scales / zero points (re-calibrated)
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
        "concurrency",  # answers from threads calling one session at once differ from serial ones
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
        return shapes.to_dict(self)


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
    max_decision_flip_ratio: float = 0.0
    numeric: str = "fail"  # "warn": a numeric drift that flips no decision is a warning (the two-tier rule)

    def to_dict(self) -> dict[str, Any]:
        return shapes.to_dict(self)


@dataclass(frozen=True)
class DecisionStats:
    """An output's decisions (``models[].decisions``) counted against the baseline's; ``flips``: the first
    flipped (sample, row), a row indexing the sample's raveled decisions (docs/concepts.md)."""

    kind: str
    total: int = 0
    flipped: int = 0
    flips: tuple[tuple[int, int], ...] = ()
    DERIVED: ClassVar = (("ratio", "flips"),)  # written for readers (the API's DecisionsOut), ignored when read

    @property
    def ratio(self) -> float:
        return self.flipped / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, Any]:
        return shapes.to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DecisionStats:
        return shapes.from_dict(cls, data)


@dataclass(frozen=True)
class OutputStats:
    """One output against its baseline, truthy when within tolerance; the same value fresh or from the store."""

    name: str
    verdict: Verdict
    metrics: OutputMetrics
    tolerance: AppliedTolerance
    reasons: tuple[Reason, ...] = ()
    dtype: str = ""
    shape: tuple[int, ...] = ()
    decisions: DecisionStats | None = None
    warnings: tuple[Reason, ...] = ()  # numeric reasons demoted by ``tolerance.numeric: warn``

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

        ``OutputMetrics.error_ratio`` when the comparison gave it; else exact where it can be (a NaN/Inf
        mismatch or a differing integer: +Inf; no difference: 0; ``rtol == 0``: ``max_abs_error / atol``)
        and NaN rather than a guess otherwise."""
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
        """``max_abs_error / atol`` (inf when atol is 0 and they differ, nan stays nan); > 1 alone is no
        failure (``rtol`` adds headroom); the store keeps it per run as ``worst_atol_ratio``."""
        error, atol = self.metrics.max_abs_error, self.tolerance.atol
        if atol > 0:
            return error / atol
        return 0.0 if error == 0 else math.inf if not math.isnan(error) else math.nan

    def to_dict(self) -> dict[str, Any]:
        return shapes.to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutputStats:
        """Rebuild an output from ``to_dict`` output."""
        return shapes.from_dict(cls, data)


@dataclass(frozen=True)
class OutputDigest:
    """What one output computed, as hashes (``compare/digest.py``): xxh3-128 of each sample's dtype, shape and
    raw bytes, in sample order (``""`` where the sample produced none); for a floating output the sum of its
    elements (``total``) and their L2 norm (``magnitude``) over every sample, non-finite ones counted as 0, which
    the fleet vote compares within a tolerance where nodes cannot be bit-exact (docs/fleet.md)."""

    name: str
    samples: tuple[str, ...] = ()
    total: float | None = None
    magnitude: float | None = None
    elements: int = 0  # over every sample: the sums' tolerance grows with it

    def to_dict(self) -> dict[str, Any]:
        return shapes.to_dict(self)


def run_error_ratio(ratios: Iterable[float | None]) -> float | None:
    """A run's one "error ÷ tolerance" figure (``error_ratio`` everywhere; 1 is the line): its outputs' largest.

    NaN and None are skipped while any output has a known value; NaN when none has; None without outputs."""
    seen = [r for r in ratios if r is not None]
    known = [r for r in seen if not math.isnan(r)]
    if known:
        return max(known)
    return math.nan if seen else None


def worst_output(outputs: Iterable[OutputStats]) -> OutputStats | None:
    """The output furthest from its line (the run's ``worst_output``): worst verdict, then largest atol ratio."""

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
    environment: EnvironmentSnapshot = field(default_factory=lambda: EnvironmentSnapshot())
    attribution: str | None = None
    details: Details = field(default_factory=lambda: Details())  # typed: monitor.details
    digests: tuple[OutputDigest, ...] = ()  # each output's per-sample digests (docs/fleet.md)
    run_digest: str | None = None  # one xxh3-128 of every output of every sample: equal runs computed equal bits
    stack: Mapping[str, str] = field(default_factory=dict)  # the stack key's fields (runtime/stackkey.py)
    stack_key: str | None = None  # their digest: the fleet vote compares runs of one model and one stack key
    DERIVED: ClassVar = (("duration_s", "finished_at"), ("all_reasons", "reasons"))  # written, not read

    def __bool__(self) -> bool:
        return self.verdict is Verdict.PASS

    @property
    def duration_s(self) -> float:
        return self.finished_at - self.started_at

    @property
    def environment_fingerprint(self) -> str | None:
        """The fingerprint of the environment snapshot, as the store records it on the run."""
        return fingerprint_of(self.environment)

    def all_reasons(self) -> tuple[Reason, ...]:
        """Check-level reasons followed by every output's reasons."""
        return self.reasons + tuple(r for o in self.outputs for r in o.reasons)

    def to_dict(self) -> dict[str, Any]:
        """Every field (reasons: check-level; ``all_reasons``: the outputs' too), mapped by ``monitor.shapes``."""
        return shapes.to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckResult:
        """Rebuild a result from ``to_dict`` output (used across the child-process boundary)."""
        return shapes.from_dict(cls, data)


def fingerprint_of(snapshot: Mapping[str, Any] | None) -> str | None:
    """The ``fingerprint`` of an environment snapshot dict (``EnvSnapshot.to_dict``), None when it has none."""
    value = snapshot.get("fingerprint") if snapshot else None
    return str(value) if value else None


def error_result(model: str, code: str, detail: str, started_at: float, finished_at: float) -> CheckResult:
    """A result with verdict ``error`` for a check that could not measure anything."""
    reasons = (Reason(code, detail[:2000]),)
    return CheckResult(model, Verdict.ERROR, started_at=started_at, finished_at=finished_at, reasons=reasons)
