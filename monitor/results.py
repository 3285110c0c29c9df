"""The values a check produces: verdicts, per-output statistics and the check result.

Everything here is a frozen dataclass built from the standard library only, so sinks,
the store and the API can consume results without importing numpy or ONNX Runtime.
Values answer ``bool()``: ``if stats:`` means "within tolerance" while the numbers stay
attached for metrics and reports (a habit borrowed from Polygraphy's compare results).
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
        order = {Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.ERROR: 2}
        return max(verdicts, key=order.__getitem__, default=Verdict.PASS)


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
        # could not measure (verdict error)
        "shape_changed",
        "dtype_changed",
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
    """Comparison of one named output with its baseline; truthy when within tolerance."""

    name: str
    verdict: Verdict
    metrics: OutputMetrics
    tolerance: AppliedTolerance
    reasons: tuple[Reason, ...] = ()
    dtype: str = ""
    shape: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return self.verdict is Verdict.PASS

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
            "reasons": [dataclasses.asdict(r) for r in self.reasons],
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
        outputs = tuple(
            OutputStats(
                name=o["name"],
                verdict=Verdict(o["verdict"]),
                dtype=o.get("dtype", ""),
                shape=tuple(o.get("shape", ())),
                metrics=OutputMetrics(**o["metrics"]),
                tolerance=AppliedTolerance(**o["tolerance"]),
                reasons=tuple(Reason(**r) for r in o.get("reasons", ())),
            )
            for o in data.get("outputs", ())
        )
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
