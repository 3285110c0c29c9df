"""Chosen samples of a model's benchmark set run again in a fresh session, hashed (the fleet's re-run).

The fleet vote re-runs an outvoted node's differing samples on that node (``fleet/attribute.py``): a new
``Session`` built as configured (never a kept one), the active baseline's benchmark set, each output's
digest as a check records it (``compare/digest.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.compare.digest import array_digest
from monitor.config.plan import CheckPlan
from monitor.errors import MonitorError
from monitor.files import baselines, benchsets
from monitor.runtime.session import Session


def rerun_digests(plan: CheckPlan, samples: Sequence[int]) -> dict[str, dict[int, str]]:
    """output -> sample -> digest of ``samples`` replayed once each in a fresh session."""
    baseline = baselines.active(plan.baselines_dir, plan.model.name)
    if baseline is None:
        raise MonitorError(f"no active baseline for {plan.model.name!r}: nothing to re-run")
    bench = benchsets.open_benchset(plan.benchsets_dir, baseline.meta.benchset, baseline.meta.benchset_version)
    session = Session(plan.model.path, plan.model.providers, plan.model.session)
    found: dict[str, dict[int, str]] = {name: {} for name in session.output_names}
    for index in samples:
        if 0 <= index < len(bench):
            for name, value in session.run(bench.load_sample(index)).items():
                found.setdefault(name, {})[index] = array_digest(value)
    return found
