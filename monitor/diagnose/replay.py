"""One experiment, inside its isolated child: replay a few samples under one variation and measure.

``measure(plan, variation, samples)`` builds a session from the variation (after setting its
environment variables, so ``NVIDIA_TF32_OVERRIDE`` is seen when CUDA initializes), replays the
given benchmark samples of the baseline's benchmark-set version and compares them with the
baseline through ``compare.outputs``: the figure is ``OutputStats.error_ratio`` (worst
``|a-b| / (atol + rtol*|b|)``, 1.0 is the line), the same one the check and the metrics report,
and the ``measure`` (``diagnose.measure``: max |error|, max ULP, the share of elements off), which
stays finite where the ratio does not (a bitwise tolerance).

With ``scan`` the samples are all of them (up to a cap) and each sample's own ratio comes back,
so the engine can keep the failing ones for the other experiments. With ``repeat`` the samples run
a second time and the spread between the two runs is measured with the same yardstick
(repeat-run determinism; its ``spread`` measure). Returns plain data (it crosses the process boundary); raises nothing
it can turn into data: a session that cannot be built is ``{"error": ...}``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from monitor.compare import outputs
from monitor.config.plan import CheckPlan
from monitor.diagnose.knobs import Variation
from monitor.diagnose.measure import of_outputs
from monitor.errors import MonitorError
from monitor.files import baselines, benchsets
from monitor.results import OutputStats
from monitor.runtime.session import Session


def measure(
    plan: CheckPlan, variation: Variation, samples: Sequence[int] | None, repeat: bool = False, scan_cap: int = 64
) -> dict[str, Any]:
    """Replay ``samples`` (None: the first ``scan_cap``) under ``variation``; the error ratio against the baseline."""
    began = time.perf_counter()
    os.environ.update(variation.env)
    try:
        baseline = baselines.active(plan.baselines_dir, plan.name)
        if baseline is None:
            return {"error": f"no active baseline for {plan.name!r}"}
        bench = benchsets.open_benchset(plan.benchsets_dir, baseline.meta.benchset, baseline.meta.benchset_version)
        session = Session(plan.model.path, variation.providers, variation.session)
        tolerances = plan.tolerances(session.output_names)
        count = min(len(bench), baseline.meta.sample_count)
        chosen = [i for i in samples if 0 <= i < count] if samples is not None else list(range(min(count, scan_cap)))
        actual: dict[str, list[np.ndarray]] = {name: [] for name in session.output_names}
        expected: dict[str, list[np.ndarray]] = {name: [] for name in baseline.meta.outputs}
        again: dict[str, list[np.ndarray]] = {name: [] for name in session.output_names}
        per_sample: list[float] = []
        for index in chosen:
            feeds = bench.load_sample(index)
            produced = session.run(feeds, where=f"benchset {bench.name!r} sample {index}")
            wanted = baseline.sample_outputs(index)
            if samples is None:
                per_sample.append(worst_ratio(outputs.compare_outputs(_one(produced), _one(wanted), tolerances)))
            for name in actual:
                actual[name].append(produced[name])
            for name in expected:
                expected[name].append(wanted[name])
            if repeat:
                second = session.run(feeds, where=f"benchset {bench.name!r} sample {index}")
                for name in again:
                    again[name].append(second[name])
    except MonitorError as exc:
        return {"error": str(exc)[:1000], "seconds": time.perf_counter() - began}
    stats = outputs.compare_outputs(actual, expected, tolerances)
    measured: dict[str, Any] = {
        "error_ratio": worst_ratio(stats),
        "within_tolerance": all(stats),
        "measure": _measure(stats),
        "outputs": {s.name: s.error_ratio for s in stats},
        "failing_outputs": [s.name for s in stats if not s],
        "samples": chosen,
        "providers_effective": list(session.info.effective),
        "seconds": time.perf_counter() - began,
    }
    if samples is None:
        measured["per_sample"] = per_sample
    if repeat:
        spread = outputs.compare_outputs(again, actual, {n: tolerances[n] for n in actual})
        measured["repeat_ratio"] = worst_ratio(spread)
        measured["repeat_bitwise"] = all(s.metrics.bitwise_equal for s in spread)
        measured["spread"] = _measure(spread)
    return measured


def measure_shared(plan: CheckPlan, variations: Sequence[Variation], samples: Sequence[int]) -> dict[str, Any]:
    """``measure`` of each variation in turn, in this one child (only those ``knobs.may_share_a_child``).

    Each builds its own session, as in a child of its own; the previous one (and its thread pool) is
    freed when its ``measure`` returns. No ``gc.collect()`` between them: it would walk, and so copy,
    every object the child inherited from the forkserver (seconds on a loaded machine).
    ``{"measured": [one measure per variation, in order]}``.
    """
    return {"measured": [measure(plan, variation, samples) for variation in variations]}


def worst_ratio(stats: Sequence[OutputStats]) -> float:
    """The largest ``error_ratio`` of the outputs; an output that could not be measured counts as inf."""
    worst = 0.0
    for output in stats:
        ratio = output.error_ratio if output.is_measured else math.inf
        if math.isnan(ratio):  # not knowable from the metrics: fall back to its verdict
            ratio = 0.0 if output else math.inf
        worst = max(worst, ratio)
    return worst


def _measure(stats: Sequence[OutputStats]) -> dict[str, Any] | None:
    found = of_outputs(stats)
    return found.to_dict() if found is not None else None


def _one(sample: Mapping[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    return {name: [value] for name, value in sample.items()}
