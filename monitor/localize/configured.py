"""Localize a configured model: pick the sample, the comparison side and the budget from config.

``localize.localize`` works on a model file and feeds; this module is the glue that a
user (``onnxmon localize``) and the daemon (``localize_on_fail``) share: it takes the
sample from the active baseline's benchmark-set version and, with ``against="auto"``,
compares with the intermediates stored at baseline time when there are any (the "what
changed inside the model after the upgrade" view), else with a reference session.
"""

from __future__ import annotations

from typing import Literal

from monitor.config.plan import CheckPlan
from monitor.errors import BaselineError
from monitor.files import baselines
from monitor.files import benchsets as benchset
from monitor.localize import engine as localize
from monitor.localize.report import LocalizationReport

Against = Literal["auto", "reference", "baseline"]
Mode = Literal["auto", "all", "bisect"]


def localize_model(
    plan: CheckPlan,
    *,
    sample: int = 0,
    against: Against = "auto",
    mode: Mode = "auto",
    chunk_size: int = 64,
    rel_threshold: float = 0.01,
    time_budget_s: float | None = None,
) -> LocalizationReport:
    """Localize the first divergent node of ``plan``'s model on one benchmark sample."""
    model = plan.model
    baseline = baselines.active(plan.baselines_dir, model.name)
    if baseline is not None:
        bench = benchset.open_benchset(plan.benchsets_dir, baseline.meta.benchset, baseline.meta.benchset_version)
    else:
        bench = benchset.ensure(plan.benchset, plan.benchsets_dir)
    feeds = bench.load_sample(sample)
    stored = _stored_samples(baseline)
    side: Literal["reference", "baseline"]
    if against == "baseline" or (against == "auto" and sample in stored):
        if baseline is None:
            raise BaselineError(f"no active baseline for {model.name!r}: run `onnxmon baseline capture {model.name}`")
        if sample not in stored:
            raise BaselineError(
                f"baseline {baseline.id} has no intermediates for sample {sample} (stored: {sorted(stored)});"
                f" capture them with `onnxmon baseline capture {model.name} --intermediates --samples {sample + 1}`"
            )
        side = "baseline"
    else:
        side = "reference"
    return localize.localize(
        model.path,
        feeds,
        providers=model.providers,
        session=model.session,
        against=side,
        reference_intermediates=baseline.intermediates(sample) if side == "baseline" and baseline else None,
        mode=mode,
        chunk_size=chunk_size,
        rel_threshold=rel_threshold,
        time_budget_s=time_budget_s,
    )


def _stored_samples(baseline: baselines.Baseline | None) -> set[int]:
    if baseline is None:
        return set()
    return {int(s) for s in baseline.meta.intermediates.get("samples", ())}
