"""Ranking: a revert that restores the baseline first, then what was measured, then what correlates.

Each hypothesis says its ``basis`` (``result.EXPERIMENT``, ``MEASURED``, ``EVIDENCE``) and, for an
experiment, its measured ``effect`` (``measure.effect``: the current setup and the knob's replay on
the same failing samples, on scales that stay finite under any tolerance). The ``weight`` only
orders them, so that "a knob whose revert brings the outputs back within tolerance ranks above
one that merely correlates" holds by construction; it is not a probability and no surface shows it:

* 0.93–0.99  a single knob's revert restores the baseline (a setting that differs from the
  baseline's a little higher; a smaller remaining error a little higher);
* 0.85–0.9   measured: repeats of the current setup disagree, the check's own measurements;
* ≤ 0.8      evidence (model diff, environment diff, fallback), rules, similar incidents;
* 0.5        a knob's revert reduces the drift (tenfold on max |error| or on the share of
  elements off, nothing worse) without restoring it;
* 0.1        ``unknown``, when nothing else stands.

An experiment whose revert neither restores nor reduces ranks nothing: when none does, the
diagnosis says that no experiment explains the drift (``Diagnosis.summary``). Hypotheses with the
same cause merge: the highest weight wins, evidence accumulates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from monitor.config.settings import SessionConfig
from monitor.diagnose import fixes
from monitor.diagnose.measure import REDUCES, RESTORES, Effect, Measure, ProductionChange
from monitor.diagnose.result import EXPERIMENT, MEASURED, Experiment, Hypothesis, similar_line
from monitor.knowledge.rules import RuleMatch

_PROBES = ("provider", "disable_cpu_ep_fallback")  # they measure another provider: not a setting to deploy


def from_experiments(
    experiments: Sequence[Experiment],
    before: Measure | None,
    *,
    reproduced: bool,
    outputs_failed: bool = True,
    session: SessionConfig | None = None,
    in_use: Sequence[str] = (),
    cuda_options: Mapping[str, Any] | None = None,
    recorded: Mapping[str, Any] | None = None,
) -> list[Hypothesis]:
    """Hypotheses the replays measured: a revert that restores or reduces the drift, repeats that disagree.

    ``before``: the current setup on the replayed samples; ``reproduced``: it is out of tolerance
    again. ``outputs_failed``: the run's outputs were out of tolerance (not only its other reasons).
    ``session``, ``in_use`` and ``cuda_options`` keep a fix from naming what is already in effect;
    ``recorded`` is the baseline's session record (whether a fix goes back to it).
    """
    found: list[Hypothesis] = []
    for experiment in experiments:
        if experiment.knob == "repeat":
            found += _repeat(experiment, session, in_use, cuda_options)
            continue
        if experiment.knob in ("current", "concurrency") or not reproduced:
            continue
        if before is None or experiment.measure is None:
            continue
        if experiment.effect not in (RESTORES, REDUCES):
            continue
        effect = Effect(experiment.knob, experiment.value, experiment.effect, before, experiment.measure)
        production = None
        if experiment.knob not in _PROBES and experiment.changes:
            production = ProductionChange(experiment.changes, fixes.baseline_had(experiment.changes, recorded or {}))
        fix = fixes.with_change(fixes.fix_for(experiment.knob, experiment.value, experiment.changes), production)
        weight = 0.5
        if experiment.effect == RESTORES:
            left = experiment.measure.max_abs_error / before.max_abs_error if before.max_abs_error > 0 else 0.0
            weight = 0.93 + 0.04 * max(0.0, 1.0 - left)
            weight += 0.02 if experiment.knob.startswith(("session.", "provider.", "baseline_settings")) else 0.0
            if experiment.knob == "baseline_settings":
                weight -= 0.03  # a bundle: the single differing setting, when one restores it too, is more precise
        said = (effect.describe(),)
        found.append(
            Hypothesis(experiment.cause, min(weight, 0.99), said, fix, "experiment", EXPERIMENT, effect, production)
        )
    return found


def _repeat(
    repeat: Experiment, session: SessionConfig | None, in_use: Sequence[str], cuda_options: Mapping[str, Any] | None
) -> list[Hypothesis]:
    """Two runs of the current setup that disagree beyond tolerance: measured nondeterminism."""
    if repeat.within_tolerance is not False:
        return []
    spread = f": {repeat.measure.describe()}" if repeat.measure is not None else " beyond the tolerance"
    evidence = f"two runs of the same setup on the same samples differ{spread}"
    fix = fixes.nondeterminism_fix(session, in_use, cuda_options)
    return [Hypothesis("nondeterminism", 0.85, (evidence,), fix, "experiment", MEASURED)]


def not_reproduced(
    experiments: Sequence[Experiment], before: Experiment | None, *, outputs_failed: bool
) -> list[Hypothesis]:
    """A failure that does not reproduce points at nondeterminism only when the outputs themselves failed
    and identical repeats are not bitwise equal; a deterministic setup that passes on replay failed for
    another reason (the run's own reasons and evidence say which)."""
    repeat = next((e for e in experiments if e.knob == "repeat"), None)
    spread = repeat is not None and repeat.extra.get("bitwise") is False
    if before is None or not before.within_tolerance or not outputs_failed or not spread:
        return []
    samples = len(before.extra.get("samples", []))
    evidence = (
        f"the failure did not reproduce on a replay of {samples} samples (within tolerance)"
        " and two identical runs are not bitwise equal"
    )
    fix = "re-run the check with repeats: 3 to see the spread"
    return [Hypothesis("nondeterminism", 0.5, (evidence,), fix, "experiment", MEASURED)]


def from_rules(matches: Iterable[RuleMatch]) -> list[Hypothesis]:
    found = []
    for matched in matches:
        where = "at the localized node" if matched.localized else "somewhere in the model"
        evidence = f"rule {matched.rule.id}: {matched.rule.title} ({where}; {matched.rule.source})"
        found.append(
            Hypothesis(matched.rule.cause, matched.weight, (evidence,), matched.rule.fix, f"rule:{matched.rule.id}")
        )
    return found


def from_incidents(incidents: Iterable[Mapping[str, Any]]) -> list[Hypothesis]:
    found = []
    for incident in incidents:
        cause = str(incident.get("cause"))
        weight = min(0.8, 0.45 + 0.35 * float(incident.get("score", 0.6)))
        fix = str(incident.get("fix") or incident.get("text") or "see the incident")
        try:
            found.append(Hypothesis(cause, weight, (similar_line(incident),), fix, f"incident:{incident.get('id')}"))
        except ValueError:
            continue  # an incident stored with a cause code that no longer exists
    return found


def merge(hypotheses: Iterable[Hypothesis]) -> tuple[Hypothesis, ...]:
    """One hypothesis per cause (the highest weight's fix, source, basis and effect; all evidence), in rank order."""
    best: dict[str, Hypothesis] = {}
    evidence: dict[str, list[str]] = {}
    for hypothesis in hypotheses:
        kept = evidence.setdefault(hypothesis.cause, [])
        kept += [e for e in hypothesis.evidence if e not in kept]
        current = best.get(hypothesis.cause)
        if current is None or hypothesis.weight > current.weight:
            best[hypothesis.cause] = hypothesis
    if not best:
        best["unknown"] = Hypothesis(
            "unknown", 0.1, (), "localize the failure (onnxmon localize) and note an incident when found", "evidence"
        )
        evidence["unknown"] = ["no experiment restores the baseline and no evidence points to a cause"]
    merged = []
    for hypothesis in best.values():  # its own evidence first, then what the others of its cause add
        added = [e for e in evidence[hypothesis.cause] if e not in hypothesis.evidence]
        merged.append(dataclasses.replace(hypothesis, evidence=tuple([*hypothesis.evidence, *added][:8])))
    return tuple(sorted(merged, key=lambda h: -h.weight))
