"""What a diagnosis says: experiments (knob → error ratio), ranked hypotheses, and similar incidents.

``Diagnosis.to_dict()`` is the one JSON shape the CLI (``--json``), the API, the store and the run
page read::

    {"model": ..., "run_id": ..., "seconds": ...,
     "hypotheses": [{"cause", "confidence", "evidence", "fix", "source"}],
     "experiments": [{"knob", "value", "error_ratio", "within_tolerance", "cause", "seconds", ...}],
     "similar_incidents": [{"id", "at", "cause", "fix", "text", "score"}],
     "notes": [...]}

``cause`` is always one of ``results.CAUSE_CODES``; hypotheses are sorted by confidence, most
likely first, and ``Diagnosis.top`` is the line ``onnxmon check`` prints.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.results import CAUSE_CODES


@dataclass(frozen=True)
class Experiment:
    """One replay under one knob: the error ratio it measured (1.0 is the tolerance line)."""

    knob: str
    value: str
    cause: str
    error_ratio: float | None  # None: the experiment could not measure (see ``note``)
    within_tolerance: bool | None
    seconds: float = 0.0
    note: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return self.error_ratio is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "knob": self.knob,
            "value": self.value,
            "error_ratio": self.error_ratio,
            "within_tolerance": self.within_tolerance,
            "cause": self.cause,
            "seconds": round(self.seconds, 4),
            "note": self.note,
            **dict(self.extra),
        }


@dataclass(frozen=True)
class Hypothesis:
    """A candidate cause with how sure we are (0..1), what points to it, and what to try."""

    cause: str
    confidence: float
    evidence: tuple[str, ...]
    fix: str
    source: str = ""  # "experiment", "evidence", "rule:<id>", "incident:<id>"

    def __post_init__(self) -> None:
        if self.cause not in CAUSE_CODES:
            raise ValueError(f"unknown cause code {self.cause!r}; known: {sorted(CAUSE_CODES)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "confidence": round(self.confidence, 3),
            "evidence": list(self.evidence),
            "fix": self.fix,
            "source": self.source,
        }


@dataclass(frozen=True)
class Diagnosis:
    """The outcome of ``diagnose``: hypotheses most likely first, the experiments behind them."""

    model: str
    hypotheses: tuple[Hypothesis, ...]
    experiments: tuple[Experiment, ...] = ()
    similar_incidents: tuple[Mapping[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    run_id: int | None = None
    localization: Mapping[str, Any] | None = None  # the localized nodes (name, op type), when there were any

    @property
    def top(self) -> Hypothesis | None:
        return self.hypotheses[0] if self.hypotheses else None

    def headline(self, *, weighed: bool = True) -> str:
        """One line for ``onnxmon check``: the most likely cause, its evidence, and a similar incident.

        The weight is ``onnxmon diagnose``'s own figure for the same run; ``weighed=False`` (a ranking
        from the evidence alone, nothing replayed) leaves it out rather than print another one.
        """
        top = self.top
        if top is None:
            return "likely cause: none (nothing to diagnose)" if not self.experiments else "likely cause: unknown"
        first = top.evidence[0].split(" (somewhere")[0].split(" (at the localized")[0] if top.evidence else ""
        evidence = f" ({first[:117]}...)" if len(first) > 120 else f" ({first})" if first else ""
        weight = f" {top.confidence:.0%}" if weighed else ""
        label = "likely cause" if weighed else "likely cause (evidence only, not replayed)"
        line = f"{label}: {top.cause}{weight}{evidence}; try: {top.fix}"
        if self.similar_incidents:
            similar = similar_line(self.similar_incidents[0])
            if similar not in first:  # the top's own evidence may be that incident: say it once
                line += "; " + similar
        return line

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "run_id": self.run_id,
            "seconds": round(self.seconds, 3),
            "hypotheses": [h.to_dict() for h in self.hypotheses],
            "experiments": [e.to_dict() for e in self.experiments],
            "similar_incidents": [dict(i) for i in self.similar_incidents],
            "notes": list(self.notes),
            "localization": dict(self.localization) if self.localization is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnosis:
        """Rebuild from ``to_dict`` output (a stored document); unknown cause codes are dropped."""
        hypotheses = []
        for h in data.get("hypotheses") or []:
            if h.get("cause") in CAUSE_CODES:
                evidence = tuple(str(e) for e in h.get("evidence") or ())
                confidence = float(h.get("confidence") or 0.0)
                hypotheses.append(
                    Hypothesis(h["cause"], confidence, evidence, str(h.get("fix", "")), str(h.get("source", "")))
                )
        experiments = tuple(
            Experiment(
                str(e.get("knob")),
                str(e.get("value")),
                str(e.get("cause", "unknown")),
                finite_or_none(e.get("error_ratio")),
                e.get("within_tolerance"),
                float(e.get("seconds") or 0.0),
                str(e.get("note") or ""),
            )
            for e in data.get("experiments") or []
        )
        return cls(
            model=str(data.get("model", "")),
            hypotheses=tuple(hypotheses),
            experiments=experiments,
            similar_incidents=tuple(dict(i) for i in data.get("similar_incidents") or []),
            notes=tuple(str(n) for n in data.get("notes") or []),
            seconds=float(data.get("seconds") or 0.0),
            run_id=data.get("run_id"),
            localization=data.get("localization") if isinstance(data.get("localization"), Mapping) else None,
        )


def similar_line(incident: Mapping[str, Any]) -> str:
    """ "similar to incident 12 on 2026-11-03: conv_algorithm, fixed by cudnn_conv_algo_search=DEFAULT"."""
    day = str(incident.get("at", ""))[:10]
    fix = incident.get("fix")
    fixed = f", fixed by {fix}" if fix else ""
    return f"similar to incident {incident.get('id')} on {day}: {incident.get('cause')}{fixed}"


def top_cause(document: Mapping[str, Any] | None) -> str | None:
    """The first hypothesis' cause of a stored diagnosis document, when it is a known code."""
    if not isinstance(document, Mapping):
        return None
    hypotheses = document.get("hypotheses")
    if not isinstance(hypotheses, Sequence) or not hypotheses or not isinstance(hypotheses[0], Mapping):
        return None
    cause = hypotheses[0].get("cause")
    return cause if cause in CAUSE_CODES else None


def finite_or_none(value: Any) -> float | None:
    """A ratio for JSON: floats stay (inf is encoded by jsonsafe), anything else is None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(float(value)):
        return float(value)
    return None
