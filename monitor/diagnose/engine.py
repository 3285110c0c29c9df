"""``diagnose(plan, run)``: replay a failing run's samples one knob at a time and rank the causes.

The flow, bounded by ``budget_s`` from the start:

1. the current setup on every sample (up to ``scan_cap``), to find the failing samples and the
   "before" error ratio; the failing ones (at most ``max_samples``) are what every later
   experiment replays, so each stays cheap;
2. the same setup twice on those samples (repeat-run determinism);
3. each ``knobs.variations`` recipe, one knob changed: those that may share a child
   (``knobs.may_share_a_child``: options ONNX Runtime keeps per session) one after another in one
   isolated child, the others (environment variables, another flush-to-zero, TensorRT) each in its
   own; each experiment has its timeout (``per_experiment_s``, never beyond the budget). A shared
   child that crashes or times out is replayed knob by knob, each alone, so a crash is one knob's
   note, as before. ``share=False``: every experiment in its own child (the path this replaced);
   what the budget leaves out is listed in ``notes``;
4. a localization of one failing sample against the baseline's stored intermediates, when the
   baseline keeps them and the run has none (its op types feed the rules and the signature);
5. each experiment's ``effect``: its measure against the current setup's on the same samples
   (the repeat child's first run: ``before``), on scales that stay finite under any tolerance;
6. the evidence of the run (``evidence.from_run``), the built-in rules (``knowledge.rules``; a rule
   whose fix is already in effect is a note) and the similar incidents the caller found;
7. ``rank.merge``: one hypothesis per cause, in rank order: what a revert measurably restores,
   what was measured, the evidence, what a revert only reduces.

Isolation is injected (``Isolator``): the daemon and the CLI pass ``daemon.diagnosis.isolated``
(a child per experiment, its process group killed at its timeout); this layer sits below the
daemon and cannot import it. An experiment that crashes or times out is an experiment without a
ratio and a note, never an exception.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Unpack

from monitor.config.plan import CheckPlan
from monitor.details import Details
from monitor.diagnose import concurrency, evidence, fixes, knobs, modelfile, rank
from monitor.diagnose.measure import Measure, effect
from monitor.diagnose.replay import measure, measure_shared
from monitor.diagnose.result import Diagnosis, Experiment, finite_or_none
from monitor.files import baselines
from monitor.knowledge import rules
from monitor.knowledge.incidents import of_run
from monitor.knowledge.incidents import similar as similar_incidents
from monitor.results import CheckResult, Verdict

Isolator = Callable[[Callable[..., Mapping[str, Any]], tuple[Any, ...], float], Mapping[str, Any]]
Clock = Callable[[], float]


def diagnose(
    plan: CheckPlan,
    run: CheckResult,
    *,
    isolate: Isolator,
    budget_s: float = 120.0,
    per_experiment_s: float = 30.0,
    max_samples: int = 4,
    scan_cap: int = 64,
    incidents: Iterable[Mapping[str, Any]] = (),
    run_id: int | None = None,
    replay: bool = True,
    share: bool = True,
    clock: Clock = time.monotonic,
) -> Diagnosis:
    """Diagnose ``run`` (a result of ``plan``'s model; a stored one is ``CheckResult.from_dict``'s) within ``budget_s``.

    ``replay=False`` skips the experiments: evidence, rules and incidents only (what ``check`` prints).
    """
    began = clock()
    if run.verdict is Verdict.PASS:
        return nothing_to_diagnose(plan.name, run_id=run_id)
    children = _Children(isolate, began + budget_s, per_experiment_s, clock)
    notes: list[str] = []
    experiments: list[Experiment] = []
    baseline = baselines.active(plan.baselines_dir, plan.name)
    if baseline is not None and "baseline_source" not in run.details:
        # a run recorded before checks said which baseline kind they compared against
        run = _with_details(run, baseline_source=baseline.meta.source)
    before: Experiment | None = None
    reference: Measure | None = None  # the current setup on the replayed samples
    samples: list[int] = []
    if baseline is None:
        notes.append(f"no active baseline for {plan.name!r}: nothing to replay against")
    elif not replay:
        pass
    elif run.verdict is Verdict.ERROR:
        notes.append("the run could not measure (verdict error): no replay, evidence only")
    else:
        before, samples = _scan(plan, children, max_samples, scan_cap)
        experiments.append(before)
        if not before.measured:
            notes.append(f"the current setup could not be replayed ({before.note or 'no ratio'}): evidence only")
        else:
            swept, reference = _sweep(plan, baseline.meta.session, run, samples, children, notes, share)
            experiments += swept + _concurrency(plan, run, samples, children)
            reference = reference or before.measure
    localization = run.details.get("localization")
    if localization is None and before is not None and before.measured and before.within_tolerance is False:
        stored = {int(s) for s in baseline.meta.intermediates.get("samples", ())} if baseline is not None else set()
        chosen = [s for s in samples if s in stored]
        if chosen:  # against the baseline's own intermediates: what changed inside the model, exactly
            localization = _localize(plan, children, chosen[0], notes)
        else:
            notes.append("no localization: the baseline keeps no intermediates of a failing sample (--intermediates)")
    if isinstance(localization, Mapping) and "error" not in localization:
        run = _with_details(run, localization=localization)
    reproduced = before is not None and before.within_tolerance is False
    experiments = [_with_effect(e, reference if reproduced else None) for e in experiments]
    fixed = [e.knob for e in experiments if e.within_tolerance and e.knob not in ("current", "repeat", "concurrency")]
    repeat = next((e for e in experiments if e.knob == "repeat"), None)
    repeats_differ = bool(repeat and repeat.within_tolerance is False)
    facts = evidence.facts(
        run,
        model_op_types=modelfile.op_types(plan),
        session=plan.model.session,
        knobs_fixed=fixed,
        nondeterministic=repeats_differ,
        worst_ratio=before.error_ratio if before is not None else None,
    )
    known = rules.load()
    notes += [f"rule {r.id} not offered: its fix is already in effect ({r.fix})" for r in rules.in_effect(known, facts)]
    in_use = list(run.providers_effective) or [p.name for p in plan.model.providers]
    cuda = next((p.options for p in plan.model.providers if p.name == knobs.CUDA), {})
    signature = of_run(run.to_dict())  # the knowledge layer reads plain data (stored runs too)
    similar = similar_incidents(signature, incidents)[:3]
    outputs_failed = any(o.verdict is Verdict.FAIL for o in run.outputs)
    if before is not None and before.within_tolerance:
        notes.append(_not_reproduced(before, experiments, outputs_failed))
    recorded = baseline.meta.session if baseline is not None else {}
    hypotheses = rank.merge(
        [
            *rank.from_experiments(
                experiments,
                reference,
                reproduced=reproduced,
                outputs_failed=outputs_failed,
                session=plan.model.session,
                in_use=in_use,
                cuda_options=cuda,
                recorded=recorded,
            ),
            *rank.not_reproduced(experiments, before, outputs_failed=outputs_failed),
            *concurrency.hypotheses(experiments),
            *concurrency.from_run(run),
            *evidence.from_run(
                run, repeats_differ=repeats_differ, model_kinds=modelfile.kinds(plan), session=plan.model.session
            ),
            *rank.from_rules(rules.match(known, facts)),
            *rank.from_incidents(similar),
        ]
    )
    return Diagnosis(
        model=plan.name,
        hypotheses=hypotheses,
        experiments=tuple(experiments),
        similar_incidents=tuple(_public(i) for i in similar),
        notes=(*notes, "signature: " + _describe(signature)),
        seconds=clock() - began,
        run_id=run_id,
        localization=_nodes(run),
        before=reference if reproduced else None,
    )


def nothing_to_diagnose(model: str, *, run_id: int | None = None) -> Diagnosis:
    """The diagnosis of a passing run: no hypotheses, no experiments, and a note that says why."""
    return Diagnosis(model=model, hypotheses=(), notes=("the run passed: nothing to diagnose",), run_id=run_id)


def _not_reproduced(before: Experiment, experiments: Sequence[Experiment], outputs_failed: bool) -> str:
    samples = len(before.extra.get("samples", []))
    line = f"the failure did not reproduce: the current setup is within tolerance on a replay of {samples} samples"
    if not outputs_failed:
        return line + " (the run failed by its other reasons, not its outputs' numbers)"
    repeat = next((e for e in experiments if e.knob == "repeat"), None)
    if repeat is not None and repeat.extra.get("bitwise") is True:
        return line + "; two identical runs are bitwise equal, so not nondeterminism of this setup"
    return line


@dataclasses.dataclass(frozen=True)
class _Children:
    """How a diagnosis runs its experiments: each in a child of ``isolate``, cut at ``per_experiment_s``
    and at the budget's ``deadline`` (on ``clock``), whichever comes first (never under a second)."""

    isolate: Isolator
    deadline: float
    per_experiment_s: float
    clock: Clock

    def left(self) -> float:
        """Seconds of the budget left."""
        return self.deadline - self.clock()

    def run(
        self,
        args: tuple[Any, ...],
        job: Callable[..., Mapping[str, Any]] = measure,
        *,
        experiments: int = 1,
    ) -> Mapping[str, Any]:
        """``job(*args)`` in a child, given ``experiments`` experiments' time; a failure is its ``error``."""
        timeout = max(1.0, min(self.per_experiment_s * experiments, self.left()))
        try:
            return self.isolate(job, args, timeout)
        except Exception as exc:  # the isolator is the caller's: its failure is still one experiment's note
            return {"error": f"{type(exc).__name__}: {exc}"[:500]}


def _scan(plan: CheckPlan, children: _Children, max_samples: int, scan_cap: int) -> tuple[Experiment, list[int]]:
    """The current setup over the benchmark set: the "before" ratio and the failing samples."""
    current = knobs.current(plan.model)
    value = children.run((plan, current, None, False, scan_cap))
    experiment = _experiment(current, value)
    ratios = [float(r) for r in value.get("per_sample") or []]
    failing = [i for i, r in sorted(enumerate(ratios), key=lambda p: -p[1]) if r > 1][:max_samples]
    if not failing:  # not reproduced: replay the worst ones anyway
        failing = [i for i, _ in sorted(enumerate(ratios), key=lambda p: -p[1])][:max_samples]
    return experiment, sorted(failing)


def _sweep(
    plan: CheckPlan,
    baseline_session: Mapping[str, Any],
    run: CheckResult,
    samples: Sequence[int],
    children: _Children,
    notes: list[str],
    share: bool,
) -> tuple[list[Experiment], Measure | None]:
    """Every knob's experiment on ``samples``, and the current setup's measure on them (the repeat's first run)."""
    current = knobs.current(plan.model)
    repeat_value = children.run((plan, current, list(samples), True, 0))
    first_run = _experiment(
        knobs.Variation("repeat", "same setup twice", "nondeterminism", current.providers, current.session),
        repeat_value,
    )
    ratio = finite_or_none(repeat_value.get("repeat_ratio"))
    found = [
        Experiment(
            "repeat",
            "same setup twice",
            "nondeterminism",
            ratio,
            None if ratio is None else ratio <= 1,
            first_run.seconds,
            first_run.note,
            {"bitwise": repeat_value.get("repeat_bitwise"), "samples": list(repeat_value.get("samples") or [])},
            measure=Measure.from_dict(repeat_value.get("spread")),  # run against run, not against the baseline
        )
    ]
    if first_run.measure is None:
        notes.append("the repeat did not measure: effects are against the current setup over every scanned sample")
    in_use = list(run.providers_effective) or [p.name for p in plan.model.providers]
    skipped = []
    variations = knobs.variations(plan.model, baseline_session, in_use)
    shared = [i for i, v in enumerate(variations) if share and knobs.may_share_a_child(v, plan.model)]
    answers = _run_shared(plan, [variations[i] for i in shared], samples, children)
    if answers is None:
        notes.append("the shared replay child did not answer: each of its knobs replayed alone")
    measured = dict(zip(shared, answers or (), strict=False))
    for index, variation in enumerate(variations):
        if index in measured:
            found.append(_experiment(variation, measured[index], plan))
            continue
        if children.left() < 1.0:
            skipped.append(f"{variation.knob}={variation.value}")
            continue
        value = children.run((plan, variation, list(samples), False, 0))
        found.append(_experiment(variation, value, plan))
    if skipped:
        notes.append(f"time budget spent; not run: {', '.join(skipped)}")
    return found, first_run.measure


def _concurrency(plan: CheckPlan, run: CheckResult, samples: Sequence[int], children: _Children) -> list[Experiment]:
    """The ``concurrency`` knob, when the model is checked under concurrency or the run failed by it."""
    threads = concurrency.threads_of(plan, run)
    if threads is None or children.left() < 1.0:
        return []
    setup = concurrency.variation(plan, threads)
    value = children.run((plan, setup, concurrency.samples_of(run, samples), threads), concurrency.measure_concurrency)
    return [concurrency.experiment(setup, value)]


def _run_shared(
    plan: CheckPlan,
    variations: Sequence[knobs.Variation],
    samples: Sequence[int],
    children: _Children,
) -> list[Mapping[str, Any]] | None:
    """``variations`` replayed in one child, cut at the sum of their timeouts: their answers in order.

    [] when there is nothing to share (fewer than two) or no budget left; None when the child did not answer.
    """
    if len(variations) < 2 or children.left() < 1.0:
        return []
    args = (plan, list(variations), list(samples))
    value = children.run(args, measure_shared, experiments=len(variations))
    answers = value.get("measured")
    if not isinstance(answers, list) or len(answers) != len(variations):
        return None
    return [a if isinstance(a, Mapping) else {"error": "no answer"} for a in answers]


def _localize(plan: CheckPlan, children: _Children, sample: int, notes: list[str]) -> Mapping[str, Any] | None:
    """Localize a failing sample in a child, with what the budget leaves (evidence for the rules)."""
    left = children.left()
    if left < 5.0:
        notes.append("no localization: the time budget is spent")
        return None
    try:
        found = children.isolate(localize_job, (plan, sample, left / 2), left)
    except Exception as exc:
        found = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    if "error" in found:
        notes.append(f"no localization: {found['error']}"[:300])
        return None
    return found


def localize_job(plan: CheckPlan, sample: int, budget_s: float) -> dict[str, Any]:
    """Inside a child: ``localize.configured.localize_model`` on one sample; its report, or the error."""
    from monitor.localize import configured
    from monitor.localize.request import LocalizeRequest

    try:
        return configured.localize_model(plan, LocalizeRequest(sample=sample, time_budget_s=budget_s)).to_dict()
    except Exception as exc:  # localization is evidence: its failure is a note
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}


def _experiment(variation: knobs.Variation, value: Mapping[str, Any], plan: CheckPlan | None = None) -> Experiment:
    """One child's answer as an experiment; with ``plan``, what the variation changed against its config."""
    ratio = finite_or_none(value.get("error_ratio"))
    within = value.get("within_tolerance")
    extra: dict[str, Any] = {"samples": list(value.get("samples") or [])}
    if value.get("failing_outputs"):
        extra["failing_outputs"] = list(value["failing_outputs"])
    if variation.env:
        extra["env"] = dict(variation.env)
    return Experiment(
        knob=variation.knob,
        value=variation.value,
        cause=variation.cause,
        error_ratio=ratio,
        within_tolerance=bool(within) if ratio is not None and within is not None else None,
        seconds=float(value.get("seconds") or 0.0),
        note=str(value.get("error") or ""),
        extra=extra,
        measure=Measure.from_dict(value.get("measure")),
        changes=fixes.changes(variation, plan.model) if plan is not None else {},
    )


def _with_effect(experiment: Experiment, reference: Measure | None) -> Experiment:
    """``experiment`` with its effect against the current setup's ``reference`` (none for those two)."""
    if experiment.knob in ("current", "repeat", "concurrency"):
        return experiment
    return dataclasses.replace(experiment, effect=effect(reference, experiment.measure, experiment.within_tolerance))


def _with_details(run: CheckResult, **added: Unpack[Details]) -> CheckResult:
    """``run`` with ``added`` in its details (what the diagnosis learnt: the baseline kind, a localization)."""
    return dataclasses.replace(run, details={**run.details, **added})


def _nodes(run: CheckResult) -> dict[str, Any] | None:
    """The localized nodes (name and op type) the diagnosis used, for the document and incident signatures."""
    report = run.details.get("localization")
    if not isinstance(report, Mapping):
        return None
    nodes = {}
    for key in ("first_changed", "first_out_of_tolerance"):
        node = report.get(key)
        nodes[key] = (
            # on ORT's optimized graph a fused node stands for the model nodes it replaced
            {"name": node.get("name"), "op_type": node.get("op_type"), "fused_from": list(node.get("fused_from") or [])}
            if isinstance(node, Mapping)
            else None
        )
    return nodes


def _public(incident: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("id", "at", "cause", "fix", "text", "score", "run_id", "model")
    return {k: incident.get(k) for k in keys if k in incident}


def _describe(signature: Mapping[str, Sequence[str]]) -> str:
    return "; ".join(f"{k}={','.join(v) or '-'}" for k, v in signature.items())
