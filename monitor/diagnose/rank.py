"""Ranking: experiments that restore the baseline first, then direct measurements, then correlation.

Confidence bands (0..1), so that "a knob whose revert brings the outputs back within tolerance
ranks above one that merely correlates" holds by construction:

* 0.93–0.99  a single knob's revert brought every output back within tolerance (a setting that
  differs from the baseline's a little higher; a smaller remaining error ratio a little higher);
* 0.85       repeats of the current setup disagree beyond tolerance (measured nondeterminism);
* 0.5        a knob cut the error ratio tenfold or more without reaching the line;
* ≤ 0.8      evidence (model diff, environment diff, fallback), rules, similar incidents;
* 0.1        ``unknown``, when nothing else stands.

Hypotheses with the same cause merge: the highest confidence wins, evidence accumulates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from monitor.diagnose.result import Experiment, Hypothesis, similar_line
from monitor.knowledge.rules import RuleMatch

_FIXES = {
    "threads": "set session.intra_op_num_threads: 1 (and inter_op_num_threads: 1),"
    " or capture the baseline with the production thread count",
    "deterministic_compute": "set session.deterministic_compute: true",
    "provider": "the baseline matches the CPU provider: make the configured provider load,"
    " or use a baseline captured on it",
    "env.NVIDIA_TF32_OVERRIDE": "run with NVIDIA_TF32_OVERRIDE=0 in the environment",
}


def from_experiments(
    experiments: Sequence[Experiment], before: Experiment | None, *, outputs_failed: bool = True
) -> list[Hypothesis]:
    """Hypotheses the replays prove (a revert that restores the baseline) or measure (repeat spread).

    ``outputs_failed``: the run's outputs were out of tolerance (not only its other reasons).
    """
    found: list[Hypothesis] = []
    start = before.error_ratio if before is not None else None
    reproduced = before is not None and before.within_tolerance is False
    for experiment in experiments:
        if experiment.knob == "repeat":
            ratio = experiment.error_ratio
            if ratio is not None and ratio > 1:
                evidence = f"two runs of the same setup differ by {ratio:.3g}× the tolerance"
                found.append(
                    Hypothesis(
                        "nondeterminism",
                        0.85,
                        (evidence,),
                        "set session.deterministic_compute: true; for CUDA also cudnn_conv_algo_search: DEFAULT;"
                        " `onnxmon localize MODEL --against self` names the first node that differs between runs",
                        "experiment",
                    )
                )
            continue
        if experiment.knob == "current" or not experiment.measured or not reproduced or start is None:
            continue
        after = float(experiment.error_ratio or 0.0)
        change = f"{experiment.knob}={experiment.value}: error ratio {start:.3g} → {after:.3g}"
        if experiment.within_tolerance:
            confidence = (
                0.93
                + 0.04 * max(0.0, 1.0 - after)
                + (0.02 if experiment.knob.startswith(("session.", "provider.", "baseline_settings")) else 0.0)
            )
            if experiment.knob == "baseline_settings":
                confidence -= 0.03  # a bundle: the single differing setting, when one restores it too, is more precise
            found.append(
                Hypothesis(
                    experiment.cause,
                    min(confidence, 0.99),
                    (change + " (within tolerance)",),
                    fix_for(experiment),
                    "experiment",
                )
            )
        elif after <= start / 10:
            found.append(
                Hypothesis(
                    experiment.cause,
                    0.5,
                    (change + " (better, still over the line)",),
                    fix_for(experiment),
                    "experiment",
                )
            )
    repeat = next((e for e in experiments if e.knob == "repeat"), None)
    spread = repeat is not None and repeat.extra.get("bitwise") is False
    # a failure that does not reproduce points at nondeterminism only when the outputs themselves
    # failed and identical repeats are not bitwise equal; a deterministic setup that passes on
    # replay failed for another reason (the run's own reasons and evidence say which)
    if before is not None and before.within_tolerance and outputs_failed and spread:
        found.append(
            Hypothesis(
                "nondeterminism",
                0.5,
                (
                    f"the failure did not reproduce on a replay of {len(before.extra.get('samples', []))} samples"
                    f" (error ratio {before.error_ratio:.3g}) and two identical runs are not bitwise equal",
                ),
                "re-run the check with repeats: 3 to see the spread",
                "experiment",
            )
        )
    return found


def fix_for(experiment: Experiment) -> str:
    """What to set in the config for the knob that restored the baseline."""
    if experiment.knob in _FIXES:
        return _FIXES[experiment.knob]
    if experiment.knob == "baseline_settings":
        return "use the session and provider settings the baseline was captured with"
    if experiment.knob.startswith("provider."):
        provider, option = experiment.knob.removeprefix("provider.").rsplit(".", 1)
        return f"set {provider} option {option}: {experiment.value}"
    if experiment.knob in (
        "cudnn_conv_algo_search",
        "use_tf32",
        "cudnn_conv_use_max_workspace",
        "trt_fp16_enable",
        "trt_int8_enable",
    ):
        return f"set the provider option {experiment.knob}={experiment.value}"
    field = experiment.knob.removeprefix("session.")
    if field == "denormal_as_zero":
        return f"add session.config_entries session.set_denormal_as_zero: '{experiment.value}'"
    return f"set session.{field}: {experiment.value}"


def from_rules(matches: Iterable[RuleMatch]) -> list[Hypothesis]:
    found = []
    for matched in matches:
        where = "at the localized node" if matched.localized else "somewhere in the model"
        evidence = f"rule {matched.rule.id}: {matched.rule.title} ({where}; {matched.rule.source})"
        found.append(
            Hypothesis(matched.rule.cause, matched.confidence, (evidence,), matched.rule.fix, f"rule:{matched.rule.id}")
        )
    return found


def from_incidents(incidents: Iterable[Mapping[str, Any]]) -> list[Hypothesis]:
    found = []
    for incident in incidents:
        cause = str(incident.get("cause"))
        confidence = min(0.8, 0.45 + 0.35 * float(incident.get("score", 0.6)))
        fix = str(incident.get("fix") or incident.get("text") or "see the incident")
        try:
            found.append(
                Hypothesis(cause, confidence, (similar_line(incident),), fix, f"incident:{incident.get('id')}")
            )
        except ValueError:
            continue  # an incident stored with a cause code that no longer exists
    return found


def merge(hypotheses: Iterable[Hypothesis]) -> tuple[Hypothesis, ...]:
    """One hypothesis per cause (highest confidence, its fix and source; all evidence), most likely first."""
    best: dict[str, Hypothesis] = {}
    evidence: dict[str, list[str]] = {}
    for hypothesis in hypotheses:
        kept = evidence.setdefault(hypothesis.cause, [])
        kept += [e for e in hypothesis.evidence if e not in kept]
        current = best.get(hypothesis.cause)
        if current is None or hypothesis.confidence > current.confidence:
            best[hypothesis.cause] = hypothesis
    if not best:
        best["unknown"] = Hypothesis(
            "unknown", 0.1, (), "localize the failure (onnxmon localize) and note an incident when found", "evidence"
        )
        evidence["unknown"] = ["no experiment restored the baseline and no evidence points to a cause"]
    merged = [Hypothesis(h.cause, h.confidence, tuple(evidence[h.cause][:8]), h.fix, h.source) for h in best.values()]
    return tuple(sorted(merged, key=lambda h: -h.confidence))
