"""The vocabulary of the export linter: one ``Hazard`` per finding, gathered in a ``LintReport``.

A hazard names the node (the model's own name, or ``<op_type>#<index>`` for an unnamed one,
with the subgraph path for nodes inside ``If``/``Loop`` bodies), a closed ``code`` and a
``severity``:

- ``error``: the exported graph computes something else than the model meant to (training-mode
  BatchNorm/Dropout, a baked batch, an fp16 weight that became inf, an opset the runtime cannot
  load, a fixed dim the benchmark set varies);
- ``warning``: likely to change numbers against the framework the model came from (a Resize
  mode unlike PyTorch's, fp16 subnormals flushed to zero on FTZ hardware, a weight quantized
  at run time);
- ``info``: worth knowing, not wrong (per-tensor quantization where per-channel is supported).

A report is truthy when it holds no ``error`` (the habit of ``results.OutputStats``), so
``onnxmon lint`` exits 1 exactly when ``not report``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")

# code -> default severity. The set is closed so that a check's details stay bounded.
HAZARD_CODES: dict[str, Severity] = {
    "batchnorm_training": "error",  # BatchNormalization in training mode (batch statistics)
    "dropout_training": "error",  # Dropout active at inference (training_mode true)
    "resize_mode": "warning",  # Resize/Upsample modes unlike PyTorch's for this interpolation
    "baked_batch": "error",  # Reshape/Expand constant fixes the leading (batch) dim
    "baked_dim": "error",  # Reshape constant fixes another dynamic dim (a sequence length)
    "fixed_dim": "error",  # an input dim is fixed where the benchmark set varies it
    "opset_unsupported": "error",  # an operator-set version newer than the runtime supports
    "ir_version_unsupported": "error",  # an IR version newer than the runtime supports
    "fp16_overflow": "error",  # fp16 weights holding inf/nan: values past 65504 at conversion
    "fp16_subnormal": "warning",  # fp16 weights below 6.1e-5: flushed to 0 by FTZ hardware
    "fp16_unsafe_initializer": "info",  # an fp32 weight past 65504: an fp16 conversion overflows it (AutoCast)
    "fp16_unsafe_activation": "info",  # an fp32 activation past 512 on the benchmark set: keep it fp32 (AutoCast)
    "qdq_unfused": "warning",  # a float weight quantized at run time, or a Q/DQ pair no kernel fuses
    "qdq_per_tensor": "info",  # per-tensor weight scale where the consuming op takes per-channel
    "model_invalid": "error",  # ONNX Runtime refuses the model: a tensor short of its dims, a cycle, a shape
    "lint_error": "warning",  # one rule could not run on this model (the rest still did)
}


@dataclass(frozen=True)
class Hazard:
    """One finding: what (``code``), how bad (``severity``), where (``node``/``op_type``) and why."""

    code: str
    node: str
    op_type: str
    detail: str
    severity: Severity = "warning"

    def __post_init__(self) -> None:
        if self.code not in HAZARD_CODES:
            raise ValueError(f"unknown hazard code {self.code!r}; known: {sorted(HAZARD_CODES)}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}; known: {list(SEVERITIES)}")

    def __str__(self) -> str:
        node, op_type, detail = (_printable(t) for t in (self.node, self.op_type, self.detail))
        return f"{self.severity} {self.code} at {node} ({op_type}): {detail}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hazard:
        return cls(
            code=str(data["code"]),
            node=str(data["node"]),
            op_type=str(data["op_type"]),
            detail=str(data["detail"]),
            severity=data.get("severity", "warning"),
        )


def _printable(text: str) -> str:
    """``text`` on one line: a model's names are data, and a newline in one must not forge a hazard line."""
    return text if text.isprintable() else repr(text)[1:-1]


def hazard(code: str, node: str, op_type: str, detail: str, severity: Severity | None = None) -> Hazard:
    """A hazard with the code's default severity unless ``severity`` overrides it."""
    return Hazard(code, node, op_type, detail[:2000], severity or HAZARD_CODES[code])


@dataclass(frozen=True)
class LintReport:
    """Every hazard found in one model file; truthy when none has severity ``error``."""

    model: str
    hazards: tuple[Hazard, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return not self.errors

    @property
    def errors(self) -> tuple[Hazard, ...]:
        return tuple(h for h in self.hazards if h.severity == "error")

    def counts(self) -> dict[str, int]:
        """How many hazards of each severity (every severity present, 0 when none)."""
        return {s: sum(1 for h in self.hazards if h.severity == s) for s in SEVERITIES}

    def codes(self) -> set[str]:
        return {h.code for h in self.hazards}

    def render(self) -> str:
        """The text form ``onnxmon lint`` prints: a summary line, then one line per hazard."""
        counts = self.counts()
        summary = ", ".join(f"{n} {s}" for s, n in counts.items())
        lines = [f"{self.model}: {summary}" + ("" if self.hazards else " (no export hazards found)")]
        lines += [f"  {h}" for h in self.hazards]
        lines += [f"  (skipped: {s})" for s in self.facts.get("skipped", ())]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "ok": bool(self),
            "counts": self.counts(),
            "hazards": [h.to_dict() for h in self.hazards],
            "facts": dict(self.facts),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LintReport:
        return cls(
            model=str(data.get("model", "")),
            hazards=tuple(Hazard.from_dict(h) for h in data.get("hazards", ())),
            facts=dict(data.get("facts", {})),
        )


def ordered(hazards: Iterable[Hazard]) -> tuple[Hazard, ...]:
    """Errors first, then warnings, then info; stable within a severity (graph order)."""
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    return tuple(sorted(hazards, key=lambda h: rank[h.severity]))
