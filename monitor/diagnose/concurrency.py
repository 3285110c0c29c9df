"""The ``concurrency`` knob: the same session serially, then from N threads at once, on the same samples.

Run when the model is checked with ``checks.concurrency`` or the run failed with
``concurrency_variant``. Inside its isolated child (``measure_concurrency``): a session built as
production builds it, each sample run twice serially (do serial repeats agree bitwise?), then the
samples replayed from N threads through that one session (``runtime/concurrent.py``, the check's
schedule) and every answer's digest compared with the serial one (``compare/bitwise.py``). The
figure: the worst error ratio of a differing concurrent answer against its serial answer (the check's
tolerance, 1.0 is the line), 0 when every answer is bitwise the serial one.

What it means (``hypotheses``): concurrent answers that differ while the serial repeats agree bitwise
is the cause ``concurrency``, measured: the diagnosis says the model "differs only under
concurrency". Serial repeats that differ too are nondeterminism (the ``repeat`` experiment's), not
concurrency. ``from_run`` is the evidence a run's own ``concurrency_variant`` reasons give, for a
diagnosis without replays.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from monitor.compare import bitwise, outputs
from monitor.config.plan import CheckPlan
from monitor.diagnose.knobs import Variation, current
from monitor.diagnose.replay import worst_ratio
from monitor.diagnose.result import MEASURED, Experiment, Hypothesis
from monitor.errors import MonitorError
from monitor.files import baselines, benchsets
from monitor.results import CheckResult
from monitor.runtime import concurrent
from monitor.runtime.session import Deadline, Session

KNOB = "concurrency"
MOST_SAMPLES = 8
FIX = (
    "serve this model from one session per thread, or lock run() around it, until the component that is not"
    " thread-safe (a custom op, an execution provider, a stateful operator) is fixed; docs/concurrency.md"
)


def threads_of(plan: CheckPlan, run: CheckResult) -> int | None:
    """How many threads the knob uses: the check's own setting, else the run's record; None: not applicable."""
    configured = plan.model.checks.concurrency or 1
    recorded = run.details.get("concurrency", {}).get("threads", 0)
    if configured > 1:
        return configured
    if any(r.code == "concurrency_variant" for r in run.reasons):
        return max(2, int(recorded or 4))
    return None


def samples_of(run: CheckResult, scanned: Sequence[int]) -> list[int]:
    """The samples the run found differing under concurrency, else the diagnosis's failing ones."""
    differing = run.details.get("concurrency", {}).get("differing", {})
    named = {s for entry in differing.values() for s in entry.get("samples", [])}
    return sorted(named)[:MOST_SAMPLES] or list(scanned)[:MOST_SAMPLES]


def variation(plan: CheckPlan, threads: int) -> Variation:
    setup = current(plan.model)
    return Variation(KNOB, f"serial vs {threads} threads", KNOB, setup.providers, setup.session)


def measure_concurrency(plan: CheckPlan, setup: Variation, samples: Sequence[int], threads: int) -> dict[str, Any]:
    """Inside a child: the serial answers, twice, then the same samples from ``threads`` threads (docstring)."""
    began = time.perf_counter()
    try:
        baseline = baselines.active(plan.baselines_dir, plan.name)
        if baseline is None:
            return {"error": f"no active baseline for {plan.name!r}"}
        bench = benchsets.open_benchset(plan.benchsets_dir, baseline.meta.benchset, baseline.meta.benchset_version)
        session = Session(plan.model.path, setup.providers, setup.session)
        chosen = [i for i in samples if 0 <= i < len(bench)] or list(range(min(len(bench), MOST_SAMPLES)))
        serial: dict[int, Mapping[str, np.ndarray]] = {}
        serial_bitwise = True
        for index in chosen:
            feeds = bench.load_sample(index)
            serial[index] = session.run(feeds, where=f"sample {index}")
            again = session.run(feeds, where=f"sample {index}")
            serial_bitwise = serial_bitwise and bitwise.digests(again) == bitwise.digests(serial[index])
        wanted = {index: bitwise.digests(answer) for index, answer in serial.items()}
        tolerances = plan.tolerances(session.output_names)
        lock = threading.Lock()
        found: dict[str, Any] = {"answers_differing": 0, "differing_samples": set(), "ratio": 0.0, "outputs": set()}

        def each(slot: int, answer: Mapping[str, np.ndarray]) -> None:
            index = chosen[slot]
            differing = [n for n in wanted[index] if n not in answer or bitwise.digest(answer[n]) != wanted[index][n]]
            if not differing:
                return
            produced = {n: [answer[n]] for n in differing if n in answer}
            stats = outputs.compare_outputs(produced, {n: [serial[index][n]] for n in produced}, tolerances)
            with lock:
                found["answers_differing"] += 1
                found["differing_samples"].add(index)
                found["outputs"].update(differing)
                found["ratio"] = max(found["ratio"], worst_ratio(stats) if stats else float("inf"))

        rounds = concurrent.schedule(len(chosen), threads, concurrent.PASSES)
        with Deadline(None) as guard:  # the isolating child's timeout bounds it
            ran = concurrent.replay_concurrently(
                session, rounds, load=lambda slot: bench.load_sample(chosen[slot]), each=each, guard=guard
            )
    except MonitorError as exc:
        return {"error": str(exc)[:1000], "seconds": time.perf_counter() - began}
    ratio = float(found["ratio"])
    return {
        "error_ratio": ratio,
        "within_tolerance": ratio <= 1.0,
        "samples": chosen,
        "threads": threads,
        "calls": ran.calls,
        "overlapped_calls": ran.overlapped_calls,
        "answers_differing": found["answers_differing"] + len(ran.failures),
        "differing_samples": sorted(found["differing_samples"] | {chosen[f.sample] for f in ran.failures}),
        "differing_outputs": sorted(found["outputs"]),
        "raised": [f.error for f in ran.failures[:3]],
        "serial_bitwise": serial_bitwise,
        "seconds": time.perf_counter() - began,
    }


def experiment(setup: Variation, value: Mapping[str, Any]) -> Experiment:
    """The child's answer as the ``concurrency`` experiment (``bitwise``: every concurrent answer is the serial one)."""
    ratio = value.get("error_ratio")
    keys = ("samples", "threads", "calls", "overlapped_calls", "answers_differing", "differing_samples")
    extra: dict[str, Any] = {k: value[k] for k in (*keys, "differing_outputs", "raised") if value.get(k) is not None}
    if "answers_differing" in value:
        extra["bitwise"] = value["answers_differing"] == 0
        extra["serial_bitwise"] = bool(value.get("serial_bitwise"))
    return Experiment(
        knob=KNOB,
        value=setup.value,
        cause=KNOB,
        error_ratio=float(ratio) if isinstance(ratio, int | float) else None,
        within_tolerance=bool(value["within_tolerance"]) if "within_tolerance" in value else None,
        seconds=float(value.get("seconds") or 0.0),
        note=str(value.get("error") or ""),
        extra=extra,
    )


def hypotheses(experiments: Sequence[Experiment]) -> list[Hypothesis]:
    """Measured: concurrent answers differ while serial repeats agree bitwise: it differs only under concurrency."""
    found = next((e for e in experiments if e.knob == KNOB and e.measured), None)
    if found is None or found.extra.get("bitwise") is not False or found.extra.get("serial_bitwise") is not True:
        return []
    named = ", ".join(str(s) for s in found.extra.get("differing_samples", []))
    evidence = (
        f"differs only under concurrency: {found.extra.get('answers_differing')} of {found.extra.get('calls')} answers"
        f" from {found.extra.get('threads')} threads at once differ bitwise from the serial ones (samples {named}),"
        " while two serial runs agree bitwise"
    )
    return [Hypothesis(KNOB, 0.9, (evidence,), FIX, "experiment", MEASURED)]


def from_run(run: CheckResult) -> list[Hypothesis]:
    """Evidence: the check found answers from threads at once unlike the serial ones (``concurrency_variant``)."""
    said = [r for r in run.reasons if r.code == "concurrency_variant"]
    if not said:
        return []
    evidence = f"the check found {said[0]}"[:400]
    return [Hypothesis(KNOB, 0.75, (evidence,), FIX, "evidence")]
