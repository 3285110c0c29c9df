"""A candidate's answer, read as untrusted: parsed without a traceback, bounded, and checked against the plan.

The candidate prints what it likes; a rehearsal takes nothing from it on trust. Its answer is read as

- strict UTF-8 JSON nested at most ``MAX_DEPTH`` deep (``json.loads`` of deeper data ends in a
  ``RecursionError``; here it is one line), integers within 64 bits and floats finite as written (a
  non-finite metric is the string ``"Infinity"``, ``"-Infinity"`` or ``"NaN"``, docs/json.md);
- exactly one check result that fits ``CheckResult`` (``monitor.shapes`` names a field that does not),
  times within the replay that produced it, a diagnosis whose hypotheses name known causes on a
  known basis, an environment snapshot whose fingerprint is that of its fields (the store
  files snapshots by fingerprint);
- the answer to the question asked (``Expected``, from production's active baseline): the model asked,
  compared with production's active baseline, on that baseline's outputs; a ``pass`` also on every
  sample of the set, every output passed, no reason given, exit status 0.

Anything else is ``BadAnswer``: one line saying what was expected and what came back, which the replay
turns into a no-go (verdict ``error``, reason ``crash``), never a traceback and never a go.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from monitor import jsonsafe
from monitor.config.plan import CheckPlan
from monitor.diagnose.result import BASES, Diagnosis
from monitor.errors import MonitorError
from monitor.files import baselines
from monitor.results import CAUSE_CODES, CheckResult, Verdict
from monitor.runtime import envsnap

MAX_DEPTH = 64
"""How deep an answer may nest (a check result is 6 levels, with a diagnosis about 10)."""
TIME_SLACK_S = 60.0
"""How far outside the replay's own start and end the candidate's times may lie (one clock, stepped by NTP)."""
_INT_LIMIT = 1 << 63


class BadAnswer(ValueError):
    """An answer that is not one: the one-line message says what was expected and what came back."""


@dataclass(frozen=True)
class Expected:
    """What the answer to ``check MODEL`` must be about: production's active baseline of the model."""

    model: str
    baseline_id: str | None = None  # None: production has no active baseline it can read (``missing`` says why)
    outputs: tuple[str, ...] = ()
    sample_count: int = 0
    missing: str = ""

    @classmethod
    def of(cls, plan: CheckPlan) -> Expected:
        try:
            active = baselines.active(plan.baselines_dir, plan.name)
        except (MonitorError, OSError, ValueError) as exc:
            return cls(plan.name, missing=f"production's active baseline of {plan.name!r} cannot be read ({exc})")
        if active is None:
            return cls(plan.name, missing=f"production has no active baseline of {plan.name!r}")
        return cls(plan.name, active.id, tuple(active.meta.outputs), active.meta.sample_count)


def parse(raw: bytes) -> Any:
    """The JSON document ``raw``, bounded as above (``CheckResult.from_dict`` reads "NaN" where a type says float)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadAnswer(f"not UTF-8 (byte {raw[exc.start]:#04x} at offset {exc.start})") from None
    try:
        data = json.loads(text, parse_int=_bounded_int, parse_float=_finite_float)
    except RecursionError:
        raise BadAnswer(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, and the two hooks' refusals
        raise BadAnswer(f"not JSON onnxmon reads: {_short(str(exc))}") from None
    _within_depth(data)
    return data


def check_result(raw: bytes, expected: Expected, *, returncode: int | None, window: tuple[float, float]) -> CheckResult:
    """The one result ``check -o json`` printed, read and checked against ``expected``; ``BadAnswer`` otherwise."""
    data = parse(raw)
    if not isinstance(data, list) or len(data) != 1 or not isinstance(data[0], Mapping):
        raise BadAnswer(f"expected a list of one check result, got {_shape(data)}")
    found = dict(data[0])
    found.pop("run_id", None)
    for key in ("started_at", "finished_at"):
        found[key] = _time(key, found.get(key), window)
    try:
        result = CheckResult.from_dict(found)
    except (ValueError, TypeError, KeyError) as exc:
        raise BadAnswer(f"not a check result: {_short(str(exc))}") from None
    _vet(result, expected, returncode)
    return result


def _vet(result: CheckResult, expected: Expected, returncode: int | None) -> None:
    if result.model != expected.model:
        raise BadAnswer(f"asked for model {expected.model!r}, the answer is about {_short(repr(result.model))}")
    if result.started_at > result.finished_at:
        raise BadAnswer(f"started_at {result.started_at} is after finished_at {result.finished_at}")
    names = [o.name for o in result.outputs]
    if result.verdict is not Verdict.ERROR:  # measured: against production's baseline, on its outputs
        if expected.baseline_id is None:
            raise BadAnswer(f"a {result.verdict.value} where {expected.missing}")
        if result.baseline_id != expected.baseline_id:
            raise BadAnswer(
                f"expected a comparison with production's active baseline {expected.baseline_id},"
                f" the answer compares with {_short(repr(result.baseline_id))}"
            )
    if (names or result.verdict is Verdict.PASS) and names != list(expected.outputs):
        raise BadAnswer(
            f"expected outputs {list(expected.outputs)} (the baseline's), the answer has {_short(repr(names))}"
        )
    if result.verdict is Verdict.PASS:
        _vet_pass(result, expected, returncode)
    elif not result.all_reasons():  # a check's fail or error always says why (the report quotes it)
        raise BadAnswer(f"a {result.verdict.value} with no reason")
    _vet_diagnosis(result.details.get("diagnosis"))
    _vet_environment(result.environment)


def _vet_pass(result: CheckResult, expected: Expected, returncode: int | None) -> None:
    if result.sample_count != expected.sample_count:
        raise BadAnswer(
            f"expected a pass on the baseline's {expected.sample_count} samples,"
            f" the answer counts {result.sample_count}"
        )
    failed = [o.name for o in result.outputs if o.verdict is not Verdict.PASS]
    if failed or result.reasons:
        why = f"outputs {failed} not passed" if failed else f"reasons {[r.code for r in result.reasons]}"
        raise BadAnswer(f"the answer says pass with {_short(why)}")
    if returncode != 0:
        raise BadAnswer(f"the answer says pass, but the check exited {returncode} (a pass exits 0)")


def _vet_diagnosis(document: Any) -> None:
    """A diagnosis the report quotes: hypotheses with a known cause, a known basis and a fix in words.

    An older onnxmon's document (no ``format``) carries a ``confidence`` instead of a ``basis``: a
    number in [0, 1] when present.
    """
    if document is None:
        return
    where = "details.diagnosis"
    if not isinstance(document, Mapping) or not isinstance(document.get("hypotheses", []), list):
        raise BadAnswer(f"{where}: expected an object with a list of hypotheses, got {_shape(document)}")
    for index, hypothesis in enumerate(document.get("hypotheses", [])):
        at = f"{where}.hypotheses[{index}]"
        if not isinstance(hypothesis, Mapping):
            raise BadAnswer(f"{at}: expected an object, got {_shape(hypothesis)}")
        cause, basis, fix = hypothesis.get("cause"), hypothesis.get("basis"), hypothesis.get("fix", "")
        if cause not in CAUSE_CODES:
            raise BadAnswer(f"{at}.cause: expected a known cause code, got {_short(repr(cause))}")
        if basis is not None and basis not in BASES:
            raise BadAnswer(f"{at}.basis: expected one of {list(BASES)}, got {_short(repr(basis))}")
        if "confidence" in hypothesis:
            confidence = hypothesis["confidence"]
            if not _number(confidence) or not 0.0 <= confidence <= 1.0:
                raise BadAnswer(f"{at}.confidence: expected a number in [0, 1], got {_short(repr(confidence))}")
        if not isinstance(fix, str):
            raise BadAnswer(f"{at}.fix: expected a string, got {_shape(fix)}")
    try:
        Diagnosis.from_dict(document)  # what the run's page reads back from the store
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise BadAnswer(f"{where}: {_short(str(exc))}") from None


def _vet_environment(environment: Mapping[str, Any]) -> None:
    """A snapshot the store files under its ``fingerprint``: that must be the fingerprint of its fields."""
    if not environment:
        return
    try:
        recomputed = envsnap.EnvSnapshot.from_dict(environment).fingerprint
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise BadAnswer(f"environment: not a snapshot ({_short(str(exc))})") from None
    if environment.get("fingerprint") != recomputed:
        raise BadAnswer(
            f"environment: fingerprint {_short(repr(environment.get('fingerprint')))} is not that of its fields"
            f" ({recomputed})"
        )


def _time(key: str, value: Any, window: tuple[float, float]) -> float:
    """An RFC 3339 string or epoch seconds, within the replay that produced it (``TIME_SLACK_S`` either side)."""
    try:
        seconds = jsonsafe.epoch(value) if isinstance(value, str) else value
    except (ValueError, OverflowError, OSError):
        raise BadAnswer(f"{key}: expected an RFC 3339 time, got {_short(repr(value))}") from None
    if not _number(seconds):
        raise BadAnswer(f"{key}: expected a time, got {_short(repr(value))}")
    start, end = window
    if not start - TIME_SLACK_S <= seconds <= end + TIME_SLACK_S:
        raise BadAnswer(
            f"{key}: expected a time within the replay ({jsonsafe.timestamp(start)} to {jsonsafe.timestamp(end)}),"
            f" got {_short(repr(value))}"
        )
    return float(seconds)


def _bounded_int(text: str) -> int:
    if len(text) > 20:
        raise ValueError(f"an integer of {len(text)} digits (at most 64 bits)")
    value = int(text)
    if not -_INT_LIMIT <= value < _INT_LIMIT:
        raise ValueError(f"integer {text} out of 64 bits")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {_short(text)} out of range (a non-finite value is written as a string)")
    return value


def _within_depth(data: Any) -> None:
    """``BadAnswer`` when ``data`` nests deeper than ``MAX_DEPTH`` (walked without recursion)."""
    level: list[Any] = [data]
    for _ in range(MAX_DEPTH + 1):
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, dict | list)
        ]
        if not level:
            return
    raise BadAnswer(f"JSON nested deeper than {MAX_DEPTH} levels")


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _shape(value: Any) -> str:
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return {dict: "an object", str: "a string", type(None): "null", bool: "a boolean"}.get(type(value), "a number")


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
