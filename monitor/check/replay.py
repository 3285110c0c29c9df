"""A benchmark set replayed through a runner: each sample run ``repeats`` times, handed on one by one.

The runner is a local session or a served endpoint (``runtime/runner.py``).

Memory is bounded by one sample, not by the benchmark set: each sample runs (with its
repeats), is handed to the caller's sink (the comparison) and dropped before the next runs.
One ``Deadline`` (``runtime/watchdog.py``) covers the whole replay: its remaining time is what
is left of the check's timeout when the replay starts.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from monitor.compare.outputs import repeat_spread
from monitor.files import benchsets
from monitor.results import OutputStats, Reason, Verdict
from monitor.runtime.runner import Runner
from monitor.runtime.session import Deadline, RunTimeout

Clock = Callable[[], float]
SampleSink = Callable[[int, Mapping[str, np.ndarray]], None]


@dataclass(frozen=True)
class Replay:
    """Raw outputs of one replay: per output, one array per sample (none when streamed), plus repeat spread."""

    outputs: dict[str, list[np.ndarray]]
    spread: dict[str, float]
    seconds: float


def replay_benchset(
    session: Runner,
    bench: benchsets.Benchset,
    repeats: int,
    *,
    deadline: float | None = None,
    clock: Clock = time.time,
    each: SampleSink | None = None,
) -> Replay:
    """Run every sample ``repeats`` times; keep the first run and the spread.

    With ``each``, a sample's first-run outputs go to ``each(index, outputs)`` as soon as it has
    run and are not kept (``Replay.outputs`` stays empty): memory holds one sample, not the set.
    ``Replay.seconds`` counts the replay only, not the time spent in ``each``.
    """
    outputs: dict[str, list[np.ndarray]] = {name: [] for name in session.output_names}
    spread: dict[str, float] = {}
    began = time.perf_counter()
    elsewhere = 0.0
    with Deadline(_remaining(deadline, clock)) as guard:
        for index in range(len(bench)):
            feeds = bench.load_sample(index)
            where = f"benchset {bench.name!r} sample {index}"
            runs = session.run_repeats(feeds, repeats, guard=guard, where=where)
            for name in session.output_names:
                if repeats > 1:
                    spread[name] = max(spread.get(name, 0.0), repeat_spread([r[name] for r in runs]))
                if each is None:
                    outputs[name].append(runs[0][name])
            if each is not None:
                handed = time.perf_counter()
                first = runs[0]
                del feeds, runs  # the sink holds the only reference from here on
                each(index, first)
                del first
                elsewhere += time.perf_counter() - handed
    return Replay(outputs=outputs, spread=spread, seconds=time.perf_counter() - began - elsewhere)


def _remaining(deadline: float | None, clock: Clock) -> float | None:
    if deadline is None:
        return None
    left = deadline - clock()
    if left <= 0:
        raise RunTimeout("check exceeded its timeout before all samples ran")
    return left


def with_repeat_spread(stats: OutputStats, spread: float | None) -> OutputStats:
    """Attach run-to-run spread; a spread above the output's atol fails it as nondeterministic."""
    if spread is None:
        return stats
    metrics = dataclasses.replace(stats.metrics, nondeterminism_max_abs=spread)
    if spread <= stats.tolerance.atol:
        return dataclasses.replace(stats, metrics=metrics)
    detail = f"repeats differ by up to {spread:.3g} (> atol {stats.tolerance.atol:g})"
    reasons = (*stats.reasons, Reason("nondeterministic", detail, stats.name))
    verdict = Verdict.worst([stats.verdict, Verdict.FAIL])
    return dataclasses.replace(stats, metrics=metrics, reasons=reasons, verdict=verdict)
