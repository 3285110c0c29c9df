"""Localize a configured model: pick the sample, the comparison side, the tolerance and the budget.

``localize.localize`` works on a model file and feeds; this module is the glue that a user
(``onnxmon localize``) and the daemon (``localize_on_fail``) share: it takes the sample from the
active baseline's benchmark-set version, the tolerance from the model's config (the check's own
yardstick), and, with ``against="auto"``, compares with the intermediates stored at baseline time
when there are any (the "what changed inside the model after the upgrade" view), else with the
unoptimized model. Against the baseline, *changed* is bitwise when this process runs on the
baseline's environment fingerprint, providers and session settings.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from monitor.config.plan import CheckPlan
from monitor.errors import BaselineError
from monitor.files import baselines, benchsets
from monitor.localize import engine, selfruns
from monitor.localize.report import LocalizationReport
from monitor.localize.request import Against, LocalizeRequest
from monitor.localize.rule import Rule
from monitor.runtime import envsnap

DEFAULT_REQUEST = LocalizeRequest()


def localize_model(
    plan: CheckPlan,
    request: LocalizeRequest = DEFAULT_REQUEST,
    *,
    capture_env: Callable[[], envsnap.EnvSnapshot] = envsnap.capture,
) -> LocalizationReport:
    """Localize ``plan``'s model on ``request.sample``: first changed and first out-of-tolerance node.

    ``against="self"``: the model against itself over ``request.runs`` identical runs (``selfruns.py``).
    """
    model = plan.model
    sample, against = request.sample, request.against
    baseline = baselines.active(plan.baselines_dir, model.name)
    if baseline is not None:
        bench = benchsets.open_benchset(plan.benchsets_dir, baseline.meta.benchset, baseline.meta.benchset_version)
    else:
        bench = benchsets.ensure(plan.benchset, plan.benchsets_dir)
    feeds = bench.load_sample(sample)
    if against == "self":
        rule = Rule(request.threshold_rule, plan.default_tolerance, request.rel_threshold, cast_floats=True)
        return selfruns.localize_self(
            model.path, feeds, request, providers=model.providers, session=model.session, rule=rule
        )
    stored = _stored_samples(baseline)
    side: Against
    if against == "baseline" or (against == "auto" and sample in stored and request.reference_model is None):
        if baseline is None:
            raise BaselineError(f"no active baseline for {model.name!r}: run `onnxmon baseline capture {model.name}`")
        if sample not in stored:
            raise BaselineError(
                f"baseline {baseline.id} has no intermediates for sample {sample} (stored: {sorted(stored)});"
                f" capture them with `onnxmon baseline capture {model.name} --intermediates --samples {sample + 1}`"
            )
        side = "baseline"
    elif against == "model" or request.reference_model is not None:
        side = "model"
    else:
        side = "unoptimized"
    return engine.localize(
        model.path,
        feeds,
        request.resolved(side),
        providers=model.providers,
        session=model.session,
        reference_intermediates=baseline.intermediates(sample) if side == "baseline" and baseline else None,
        reference_outputs=_sample_outputs(baseline, sample),
        same_stack=side == "baseline" and baseline is not None and _same_stack(plan, baseline, capture_env),
        tolerance=plan.default_tolerance,
    )


def _same_stack(plan: CheckPlan, baseline: baselines.Baseline, capture_env: Callable[[], envsnap.EnvSnapshot]) -> bool:
    """Same environment fingerprint, providers and session options as when the baseline was captured."""
    meta = baseline.meta
    if meta.source != "captured" or not meta.environment.get("fingerprint"):
        return False
    options = meta.session.get("options")
    if options != plan.model.session.model_dump(mode="json"):
        return False
    requested = meta.session.get("requested")
    if isinstance(requested, list) and [str(p) for p in requested] != [p.name for p in plan.model.providers]:
        return False
    before = envsnap.EnvSnapshot.from_dict(dict(meta.environment))
    return before.fingerprint == capture_env().fingerprint


def _sample_outputs(baseline: baselines.Baseline | None, sample: int) -> dict[str, np.ndarray] | None:
    """The baseline's outputs of ``sample`` (what the check compares with), None when it has none."""
    if baseline is None or sample >= baseline.meta.sample_count:
        return None
    return baseline.sample_outputs(sample)


def _stored_samples(baseline: baselines.Baseline | None) -> set[int]:
    if baseline is None:
        return set()
    return {int(s) for s in baseline.meta.intermediates.get("samples", ())}
