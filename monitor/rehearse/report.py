"""The go/no-go report of a rehearsal: per model, and what the candidate changes against production.

A model is ``go`` when its check on the candidate passes against production's active baseline (a
warning tier, ``tolerance.numeric: warn``, is a pass); anything else is no-go: a ``fail`` (drift beyond
tolerance, decisions changed) or an ``error`` (the candidate could not measure it). A no-go carries the
diagnosis the candidate made of it (``likely_cause``: the first hypothesis, what it rests on, its
fix, and the diagnosis' one line: the cause a revert measurably restores, or "no experiment explains
this drift" and the evidence).
The candidate's environment is diffed against production's, stable fields only, versions first: the
stack that ran production's latest run of the model (else the active baseline's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.diagnose.result import Diagnosis
from monitor.rehearse.candidate import Candidate
from monitor.results import CheckResult, Verdict
from monitor.runtime import envsnap


@dataclass(frozen=True)
class ModelVerdict:
    """One model's rehearsal: the candidate's result and where it was stored."""

    result: CheckResult
    production_environment: Mapping[str, Any] | None = None
    run_id: int | None = None

    @property
    def go(self) -> bool:
        return self.result.verdict is Verdict.PASS

    def to_dict(self) -> dict[str, Any]:
        result = self.result
        return {
            "model": result.model,
            "go": self.go,
            "verdict": result.verdict.value,
            "reasons": sorted({r.code for r in result.all_reasons()}),
            "error_ratio": _finite(max((o.error_ratio for o in result.outputs if o.is_measured), default=None)),
            "decisions": _decisions(result),
            "likely_cause": None if self.go else likely_cause(result),
            "why": None if self.go else why(result),
            "environment_changes": [c.to_dict() for c in self.changes()],
            "run_id": self.run_id,
        }

    def changes(self) -> list[envsnap.FieldChange]:
        """What the candidate's stack changes against production's (stable fields, versions first)."""
        if not self.production_environment or not self.result.environment:
            return []
        try:
            old = envsnap.EnvSnapshot.from_dict(self.production_environment)
            new = envsnap.EnvSnapshot.from_dict(self.result.environment)
        except (KeyError, TypeError, ValueError):
            return []
        return [c for c in envsnap.diff(old, new) if c.stable]


@dataclass(frozen=True)
class Report:
    """The whole rehearsal: the candidate and every model's verdict, in config order."""

    candidate: Candidate
    models: Sequence[ModelVerdict] = field(default_factory=list)

    @property
    def go(self) -> bool:
        return all(m.go for m in self.models)

    def exit_code(self) -> int:
        """0 when every model is go, 1 when any is no-go (3, the candidate cannot run, is raised earlier)."""
        return 0 if self.go else 1

    def changes(self) -> list[envsnap.FieldChange]:
        """The candidate's changes against production, as the first model with both environments shows them."""
        return next((m.changes() for m in self.models if m.changes()), [])

    def to_dict(self) -> dict[str, Any]:
        changes = self.changes()
        return {
            "candidate": {
                **self.candidate.to_dict(),
                "environment_changes": [c.to_dict() for c in changes],
                "summary": envsnap.summary(changes),
            },
            "go": self.go,
            "models": [m.to_dict() for m in self.models],
        }

    def text(self) -> str:
        """The report for a terminal: the candidate, what it changes, then one line per model."""
        lines = [
            f"candidate: {self.candidate.python} (onnxruntime {self.candidate.onnxruntime_version}, "
            f"python {self.candidate.python_version})",
            f"changes against production: {envsnap.summary(self.changes())}",
            "",
        ]
        width = max((len(m.result.model) for m in self.models), default=5)
        for verdict in self.models:
            data = verdict.to_dict()
            mark = "go   " if verdict.go else "NO-GO"
            ratio = "-" if data["error_ratio"] is None else format(data["error_ratio"], ".3g")
            line = f"  {mark}  {data['model']:<{width}}  {data['verdict']:<5}  error ÷ tolerance {ratio}"
            if data["reasons"]:
                line += f"  ({', '.join(data['reasons'])})"
            lines.append(line)
            for output, decided in data["decisions"].items():
                lines.append(f"         {output}: {decided.get('flipped')} of {decided.get('total')} decisions flipped")
            cause = data["likely_cause"]
            if cause:
                lines.append(f"         {cause['summary']}")
            elif data["why"]:  # an error, or a fail the candidate did not diagnose: what it said, not only a code
                lines.append(f"         why: {data['why']}")
        verdict_line = "GO: every model matches production" if self.go else "NO-GO: see the models marked NO-GO"
        return "\n".join([*lines, "", verdict_line])


def likely_cause(result: CheckResult) -> dict[str, Any] | None:
    """The first hypothesis of the diagnosis the candidate made of a no-go (``None`` when it made none):
    its cause, ``basis`` (``experiment``, ``measured`` or ``evidence``), fix and the diagnosis' ``summary``."""
    document = result.details.get("diagnosis")
    if not isinstance(document, Mapping):
        return None
    try:  # vetted when read (rehearse/answer.py); a stored run may be older, or junk
        found = Diagnosis.from_dict(document)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    first = found.top
    if first is None:
        return None
    return {"cause": first.cause, "basis": first.basis, "fix": first.fix[:500], "summary": found.summary()[:1000]}


def why(result: CheckResult) -> str | None:
    """A no-go's first reason in words (``crash: the candidate's check exited 1 ...``), for the reader of the report."""
    first = next(iter(result.all_reasons()), None)
    return None if first is None else str(first)[:500]


def _decisions(result: CheckResult) -> dict[str, Any]:
    """Per output, the decisions the candidate's check counted (``outputs[].decisions``) without the flip list."""
    found = {}
    for output in result.outputs:
        if output.decisions is not None:
            counted = output.decisions.to_dict()
            found[output.name] = {k: counted[k] for k in ("kind", "total", "flipped", "ratio")}
    return found


def _finite(value: float | None) -> float | None:
    """NaN (not measured) as None; an infinite ratio (a bitwise tolerance broken) stays infinite."""
    return value if value is not None and value == value else None
