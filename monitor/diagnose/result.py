"""What a diagnosis says: experiments (knob → what it measured), ranked hypotheses, similar incidents.

``Diagnosis.to_dict()`` is the one JSON shape the CLI (``--json``), the API, the store and the run
page read (``format`` 2; docs/diagnose.md has it whole)::

    {"format": 2, "model": ..., "run_id": ..., "seconds": ..., "summary": "the one line",
     "hypotheses": [{"cause", "basis", "evidence", "fix", "source", "effect", "production_change"}],
     "before": {"max_abs_error", "max_ulp", "mismatch_share", "position_mismatches"},
     "experiments": [{"knob", "value", "error_ratio", "within_tolerance", "measure", "effect", "changes", ...}],
     "similar_incidents": [{"id", "at", "cause", "fix", "text", "score"}],
     "notes": [...]}

``cause`` is always one of ``results.CAUSE_CODES``. Hypotheses are in rank order: a revert that
restores the baseline (``basis: experiment``, its measured ``effect``) before what the replays or
the check measured (``measured``) before what only correlates (``evidence``: the run's record,
rules, incidents); a revert that only reduces the drift comes after the evidence. No hypothesis
carries a probability: what was measured is shown as measured, the rest is labelled evidence.
``Diagnosis.summary()`` is the line ``onnxmon check``, the run page and the rehearsal print: when no
revert restores the baseline it says "no experiment explains this drift" and names the evidence.
A document without ``format`` is an older onnxmon's (fixed per-rule ``confidence``, no measures):
``from_dict`` reads it and ``summary`` says where it comes from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor import jsonsafe
from monitor.diagnose.measure import RESTORES, Effect, Measure, ProductionChange
from monitor.results import CAUSE_CODES

FORMAT = 2
EXPERIMENT, MEASURED, EVIDENCE = "experiment", "measured", "evidence"
BASES = (EXPERIMENT, MEASURED, EVIDENCE)


@dataclass(frozen=True)
class Experiment:
    """One replay under one knob: the check's error ratio (1.0 is the line) and the finite ``measure``."""

    knob: str
    value: str
    cause: str
    error_ratio: float | None  # None: the experiment could not measure (see ``note``)
    within_tolerance: bool | None
    seconds: float = 0.0
    note: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    measure: Measure | None = None  # against the baseline, on the replayed samples
    effect: str | None = None  # against the current setup on the same samples: restores / reduces / none
    changes: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # what it set: field → (now, replayed)

    @property
    def measured(self) -> bool:
        return self.error_ratio is not None

    def outcome(self) -> str:
        """Its effect in words: against the tolerance, and against the current setup on the same samples."""
        if not self.measured:
            return self.note[:60] or "not measured"
        if self.knob == "current":
            return "over" if self.within_tolerance is False else "within"
        if self.knob == "repeat":
            bitwise = self.extra.get("bitwise")
            return "bitwise equal" if bitwise is True else "differ (run against run)"
        if self.knob == "concurrency":
            if self.extra.get("bitwise") is True:
                return "bitwise equal under concurrency"
            only = self.extra.get("serial_bitwise") is True
            return "differs only under concurrency" if only else "differs under concurrency, serially too"
        said = {True: "within", False: "over", None: "-"}[self.within_tolerance]
        return f"{said}, {self.effect}" if self.effect in ("restores", "reduces") else f"{said}, no effect"

    def to_dict(self) -> dict[str, Any]:
        return {
            "knob": self.knob,
            "value": self.value,
            "error_ratio": self.error_ratio,
            "within_tolerance": self.within_tolerance,
            "measure": self.measure.to_dict() if self.measure is not None else None,
            "effect": self.effect,
            "changes": {k: [old, new] for k, (old, new) in self.changes.items()},
            "cause": self.cause,
            "seconds": round(self.seconds, 4),
            "note": self.note,
            **dict(self.extra),
        }


@dataclass(frozen=True)
class Hypothesis:
    """A candidate cause: on what ``basis`` (a revert's measured effect, a measurement, or evidence), what
    points to it, and what to try. ``weight`` only orders hypotheses; it is not a probability and is never shown."""

    cause: str
    weight: float
    evidence: tuple[str, ...]
    fix: str
    source: str = ""  # "experiment", "evidence", "rule:<id>", "incident:<id>"
    basis: str = EVIDENCE  # EXPERIMENT: a revert's ``effect``; MEASURED: repeats or the check measured it
    effect: Effect | None = None
    production: ProductionChange | None = None  # what the fix would change in production's config

    def __post_init__(self) -> None:
        if self.cause not in CAUSE_CODES:
            raise ValueError(f"unknown cause code {self.cause!r}; known: {sorted(CAUSE_CODES)}")

    def label(self) -> str:
        """What it rests on, in words: ``measured: restores the baseline``, ``measured``, ``evidence``."""
        if self.basis == EXPERIMENT and self.effect is not None:
            restores = self.effect.kind == RESTORES
            return "measured: restores the baseline" if restores else "measured: reduces, not within tolerance"
        return "measured" if self.basis in (EXPERIMENT, MEASURED) else "evidence"

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "basis": self.basis,
            "evidence": list(self.evidence),
            "fix": self.fix,
            "source": self.source,
            "effect": self.effect.to_dict() if self.effect is not None else None,
            "production_change": self.production.to_dict() if self.production is not None else None,
        }


@dataclass(frozen=True)
class Diagnosis:
    """The outcome of ``diagnose``: hypotheses in rank order (measured first), the experiments behind them."""

    model: str
    hypotheses: tuple[Hypothesis, ...]
    experiments: tuple[Experiment, ...] = ()
    similar_incidents: tuple[Mapping[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    run_id: int | None = None
    localization: Mapping[str, Any] | None = None  # the localized nodes (name, op type), when there were any
    before: Measure | None = None  # the current setup against the baseline on the replayed samples
    format: int = FORMAT  # 1: a document of an older onnxmon (fixed per-rule weights, no measures)

    @property
    def top(self) -> Hypothesis | None:
        return self.hypotheses[0] if self.hypotheses else None

    @property
    def reproduced(self) -> bool:
        """The current setup was replayed and is out of tolerance again: experiments can measure an effect."""
        current = next((e for e in self.experiments if e.knob == "current"), None)
        return current is not None and current.within_tolerance is False

    @property
    def replayed(self) -> bool:
        """Some knob other than the current setup was replayed and measured."""
        return any(e.measured for e in self.experiments if e.knob not in ("current", "repeat", "concurrency"))

    def summary(self) -> str:
        """The one line every surface prints: the cause a revert measurably restores, or that none does, and why."""
        top = self.top
        if top is None:
            return "likely cause: none (nothing to diagnose)" if not self.experiments else "likely cause: unknown"
        first = _first_evidence(top)
        if self.format < FORMAT:
            told = f"; {first}" if first else ""
            return (
                f"likely cause: {top.cause} (diagnosed by an older onnxmon, ranked by fixed weights,"
                f" not measured{told}); try: {top.fix}"
            )
        told = f" ({first})" if first else ""
        if top.basis == EXPERIMENT and top.effect is not None and top.effect.kind == RESTORES:
            return f"likely cause: {top.cause} (measured: {top.effect.describe()}); try: {top.fix}"
        if top.basis == EXPERIMENT and top.effect is not None:
            return f"no experiment explains this drift; closest: {top.cause} ({top.effect.describe()}); try: {top.fix}"
        if top.basis in (EXPERIMENT, MEASURED):
            return f"likely cause: {top.cause} (measured: {first}); try: {top.fix}"
        if self.reproduced and self.replayed:
            closest = next((h.effect for h in self.hypotheses if h.effect is not None), None)
            partly = f" ({closest.describe()})" if closest is not None else ""
            if top.cause == "unknown":
                return f"no experiment explains this drift{partly} and no evidence points to a cause; try: {top.fix}"
            return f"no experiment explains this drift{partly}; evidence: {top.cause}{told}; try: {top.fix}"
        if not self.replayed:
            return f"likely cause (evidence only, not replayed): {top.cause}{told}; try: {top.fix}"
        return f"likely cause (evidence; the failure did not reproduce on replay): {top.cause}{told}; try: {top.fix}"

    def headline(self) -> str:
        """One line for ``onnxmon check``: ``summary()``, and a similar incident (named once)."""
        line = self.summary()
        if self.similar_incidents:
            similar = similar_line(self.similar_incidents[0])
            if similar not in line:  # the top's own evidence may be that incident: say it once
                line += "; " + similar
        return line

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "model": self.model,
            "run_id": self.run_id,
            "seconds": round(self.seconds, 3),
            "summary": self.summary(),
            "hypotheses": [h.to_dict() for h in self.hypotheses],
            "before": self.before.to_dict() if self.before is not None else None,
            "experiments": [e.to_dict() for e in self.experiments],
            "similar_incidents": [dict(i) for i in self.similar_incidents],
            "notes": list(self.notes),
            "localization": dict(self.localization) if self.localization is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnosis:
        """Rebuild from ``to_dict`` output (a stored document, of this release or an older one).

        Unknown cause codes are dropped. A document without ``format`` is an older onnxmon's: its
        hypotheses carry a fixed per-rule ``confidence`` and no measures (``summary`` says so)."""
        version = data.get("format")
        version = version if isinstance(version, int) and not isinstance(version, bool) else 1
        hypotheses = []
        for rank, h in enumerate(h for h in data.get("hypotheses") or [] if isinstance(h, Mapping)):
            if h.get("cause") not in CAUSE_CODES:
                continue
            effect = Effect.from_dict(h.get("effect"))
            basis = str(h.get("basis") or EVIDENCE)
            hypotheses.append(
                Hypothesis(
                    h["cause"],
                    -float(rank),  # the stored order is the ranking
                    tuple(str(e) for e in h.get("evidence") or ()),
                    str(h.get("fix", "")),
                    str(h.get("source", "")),
                    basis if basis in BASES else EVIDENCE,
                    effect,
                    ProductionChange.from_dict(h.get("production_change")),
                )
            )
        experiments = tuple(
            Experiment(
                str(e.get("knob")),
                str(e.get("value")),
                str(e.get("cause", "unknown")),
                finite_or_none(e.get("error_ratio")),
                e.get("within_tolerance") if isinstance(e.get("within_tolerance"), bool) else None,
                float(e.get("seconds") or 0.0),
                str(e.get("note") or ""),
                {k: v for k, v in e.items() if k not in _EXPERIMENT_KEYS},
                measure=Measure.from_dict(e.get("measure")),
                effect=str(e["effect"]) if isinstance(e.get("effect"), str) else None,
                changes=_changes(e.get("changes")),
            )
            for e in data.get("experiments") or []
            if isinstance(e, Mapping)
        )
        return cls(
            model=str(data.get("model", "")),
            hypotheses=tuple(hypotheses),
            experiments=experiments,
            similar_incidents=tuple(dict(i) for i in data.get("similar_incidents") or [] if isinstance(i, Mapping)),
            notes=tuple(str(n) for n in data.get("notes") or []),
            seconds=float(data.get("seconds") or 0.0),
            run_id=data.get("run_id"),
            localization=data.get("localization") if isinstance(data.get("localization"), Mapping) else None,
            before=Measure.from_dict(data.get("before")),
            format=version,
        )


_EXPERIMENT_KEYS = frozenset(
    {"knob", "value", "error_ratio", "within_tolerance", "measure", "effect", "changes", "cause", "seconds", "note"}
)


def _changes(data: Any) -> dict[str, tuple[str, str]]:
    if not isinstance(data, Mapping):
        return {}
    return {str(k): (str(v[0]), str(v[1])) for k, v in data.items() if isinstance(v, list | tuple) and len(v) == 2}


def _first_evidence(hypothesis: Hypothesis) -> str:
    """The first piece of evidence, shortened for one line."""
    if not hypothesis.evidence:
        return ""
    first = hypothesis.evidence[0].split(" (somewhere")[0].split(" (at the localized")[0]
    return f"{first[:117]}..." if len(first) > 120 else first


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
    """A ratio for JSON: floats stay (inf is encoded by jsonsafe, and read back from its ``"Infinity"``
    string, as a stored document has it); NaN and anything else is None."""
    if value in (jsonsafe.INFINITY, "inf"):
        return math.inf
    if isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(float(value)):
        return float(value)
    return None
