"""A served model checked beside its local control: where a drift is, ``serving`` or ``model``.

With ``models[].endpoint`` set, the check replays the benchmark set twice: through the local session built
from ``path`` (the control: ONNX Runtime here, as configured) and through the endpoint (the model where it
is served). The endpoint's outputs are the run's outputs (the numbers production serves), compared with
the same baseline, tolerances and decisions. The split:

- ``serving``: the local session matches the baseline, the endpoint does not: the serving path moved the
  numbers (JSON transport rounding, another ONNX Runtime inside the server, a TensorRT FP16 accelerator
  in ``config.pbtxt``): reason ``serving_drift``;
- ``model``: both moved: the model (or what both share) changed, not the serving path;
- ``local``: the control moved and the endpoint did not: this host's stack drifted, production did not;
- ``none``: neither moved.

Then a response cache is probed for (``cacheprobe.py``): a cached answer is reason ``endpoint_cached``,
never a pass. The server's metadata joins the environment as ``serving.*`` fields (``serving/metadata.py``).
Every failure to ask the server is an ``EndpointError`` with its own reason code (``serving/client.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.check import cacheprobe
from monitor.check.replay import Clock, replay_benchset, with_repeat_spread
from monitor.compare.accumulate import Comparison
from monitor.compare.digest import DigestAccumulator
from monitor.config.plan import CheckPlan
from monitor.files import baselines, benchsets
from monitor.results import AppliedTolerance, OutputDigest, OutputStats, Reason
from monitor.runtime import nontensor
from monitor.runtime.gpu import Entries
from monitor.runtime.session import Session
from monitor.serving import metadata, wire
from monitor.serving.client import EndpointRunner

_LAYOUT = {"shape_changed", "dtype_changed", "missing_output"}


@dataclass(frozen=True)
class Served:
    """The endpoint's side of a check: its outputs, the reasons it adds, its details and environment fields."""

    outputs: tuple[OutputStats, ...]
    reasons: tuple[Reason, ...]
    details: dict[str, Any]
    fields: Entries
    seconds: float
    digests: tuple[OutputDigest, ...]  # what the endpoint answered, hashed (the run's digests: the fleet vote's)


def runner_for(plan: CheckPlan, session: Session) -> EndpointRunner:
    """The endpoint runner of ``plan``'s model: its outputs and their dtypes are the local session's."""
    assert plan.model.endpoint is not None
    dtypes = {o.name: o.dtype for o in session.info.outputs if nontensor.is_plain(o.type)}

    def prepare(feeds: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        fitted = session.fit_float_inputs(feeds)  # the casts a client of the served model makes
        session.check_inputs(fitted, where="endpoint request")
        return fitted

    return EndpointRunner(plan.model.endpoint, dtypes, prepare=prepare)


def measure_served(
    plan: CheckPlan,
    session: Session,
    baseline: baselines.Baseline,
    bench: benchsets.Benchset,
    local: Sequence[OutputStats],
    *,
    deadline: float,
    clock: Clock,
) -> Served:
    """Replay ``bench`` through the endpoint, compare with ``baseline``, split the drift, probe for a cache."""
    runner = runner_for(plan, session)
    began = time.perf_counter()
    try:
        fields = metadata.probe(runner)
        names = runner.output_names
        tolerances = plan.tolerances(names)
        comparison = Comparison(
            list(baseline.meta.outputs),
            names,
            tolerances,
            samples=baseline.meta.sample_count,
            elements=baseline.element_counts(),
            decisions=plan.model.decisions,
        )
        layout_moved = any(r.code in _LAYOUT for o in local for r in o.reasons)
        digests = DigestAccumulator(names)

        def feed(index: int, produced: Mapping[str, np.ndarray]) -> None:
            digests.feed(produced)
            if index >= baseline.meta.sample_count:
                return
            expected = baseline.sample_outputs(index)
            if not layout_moved:  # the model keeps its shapes: a served shape off them is the server's
                for name, value in produced.items():
                    if name in expected:
                        wire.check_shape(name, value, np.asarray(expected[name]), f"sample {index}")
            comparison.feed(produced, expected)

        replay = replay_benchset(runner, bench, plan.repeats, deadline=deadline, clock=clock, each=feed)
        outputs = tuple(with_repeat_spread(o, replay.spread.get(o.name)) for o in comparison.finish(len(bench)))
        probe = _probe(plan, session, runner, bench, tolerances, all(outputs), left=lambda: deadline - clock())
    finally:
        runner.close()
    split = _split(local, outputs)
    reasons: list[Reason] = []
    if split == "serving":
        moved = [o.name for o in outputs if not o]
        reasons.append(
            Reason(
                "serving_drift",
                f"the local session matches the baseline, {runner.where} does not (outputs {moved}): the serving path"
                " moved the numbers (transport, the server's own runtime, an accelerator in its config)",
            )
        )
    if probe.reason is not None:
        reasons.append(probe.reason)
    details = {
        "split": split,
        "endpoint": runner.where,
        "local": {o.name: o.verdict.value for o in local},
        "served": {o.name: o.verdict.value for o in outputs},
        "cache_probe": probe.to_dict(),
    }
    seconds = time.perf_counter() - began
    return Served(outputs, tuple(reasons), details, fields, seconds, digests.finish())


def _probe(
    plan: CheckPlan,
    session: Session,
    runner: EndpointRunner,
    bench: benchsets.Benchset,
    tolerances: Mapping[str, AppliedTolerance],
    matches: bool,
    *,
    left: Callable[[], float],
) -> cacheprobe.Probe:
    endpoint = plan.model.endpoint
    if endpoint is None or not endpoint.cache_probe:
        return cacheprobe.Probe("inconclusive", "endpoint.cache_probe is off")
    return cacheprobe.probe(session, runner, bench, tolerances, set_matches_baseline=matches, left=left)


def _split(local: Sequence[OutputStats], served: Sequence[OutputStats]) -> str:
    local_moved, served_moved = not all(local), not all(served)
    if served_moved and not local_moved:
        return "serving"
    if served_moved:
        return "model"
    return "local" if local_moved else "none"
