"""``localize --against self``: the first node whose output differs between identical runs.

"Which op causes run-to-run differences?" (onnxruntime#13061). The model runs ``runs`` times on one
input, in one session with the production providers and settings, its tensors exposed a chunk at a
time; each chunk's runs are compared with the chunk's first run, bitwise. The search (``search.py``)
then reads the two answers as for any localization: *changed* is the first node whose output
differs between runs while its inputs did not (where the nondeterminism enters; an atomic-add
reduction, a random op, a thread-count dependent kernel), *out of tolerance* the first whose
run-to-run spread breaks the check's own tolerance. Each node's ``max_abs_error`` is its spread
(the largest difference of any run from the first). The observer effect is not checked here:
every run of a nondeterministic model differs from a plain run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.localize.graph import ExposingRunner, graph_nodes, load_model
from monitor.localize.report import LocalizationReport, top_nodes
from monitor.localize.request import LocalizeRequest
from monitor.localize.rule import Rule, spread
from monitor.localize.search import Budget, Search, SearchResult


class _Runs:
    """One exposing runner fetched ``runs`` times per chunk: the first run, and per tensor the run farthest from it."""

    def __init__(self, runner: ExposingRunner, runs: int) -> None:
        self._runner = runner
        self._runs = runs
        self._first: dict[str, np.ndarray] = {}
        self.spread: dict[str, float] = {}
        self.producible = runner.producible
        self.skipped = runner.skipped

    @property
    def runs(self) -> int:
        return self._runner.runs

    def fetch(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        wanted = list(names)
        first = self._runner.fetch(wanted)
        farthest = dict(first)
        for _ in range(self._runs - 1):
            again = self._runner.fetch(wanted)
            for name, value in again.items():
                distance = spread(first[name], value) if name in first else 0.0
                if distance > self.spread.get(name, 0.0):
                    self.spread[name], farthest[name] = distance, value
                self.spread.setdefault(name, distance)
        self._first.update(first)
        return farthest

    def first_run(self) -> _FirstRun:
        return _FirstRun(self)


class _FirstRun:
    """The reference side: the first run of each chunk the subject side fetched."""

    def __init__(self, runs: _Runs) -> None:
        self._runs = runs
        self.producible = runs.producible
        self.skipped = runs.skipped
        self.runs = 0

    def fetch(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        return {name: self._runs._first[name] for name in names if name in self._runs._first}


def localize_self(
    model_path: Path,
    feeds: Mapping[str, np.ndarray],
    request: LocalizeRequest,
    *,
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
    rule: Rule,
) -> LocalizationReport:
    """The first node whose output differs between ``request.runs`` identical runs, and each node's spread."""
    runs, chunk_size, graph_level = request.runs, request.chunk_size, request.graph_level
    time_budget_s = request.time_budget_s
    started = time.perf_counter()
    model = load_model(Path(model_path))
    level = graph_level or session.graph_optimization_level
    at_level = session.model_copy(update={"graph_optimization_level": level})
    with ExposingRunner(model, feeds, providers=providers, session=at_level, label="self") as runner:
        subject = _Runs(runner, runs)
        search = Search(
            graph_nodes(model),
            tuple(o.name for o in model.graph.output),
            subject,
            subject.first_run(),
            chunk_size=chunk_size,
            rule=rule,
            budget=Budget(started, time_budget_s),
            stop_on_observer=False,
        )
        result: SearchResult = search.run_all()
        moving = sorted(name for name, value in subject.spread.items() if value > 0)
        notes = [
            f"{len(moving)} tensor(s) differ between {runs} identical runs"
            + (f"; the largest spread {max(subject.spread.values()):.3g}" if moving else ": the model is deterministic")
        ]
        return LocalizationReport(
            model=Path(model_path).name,
            against="self",
            mode="all",
            first_changed=result.first_changed,
            first_out_of_tolerance=result.first_out_of_tolerance,
            comparison="bitwise",
            comparison_detail=f"the model against itself: {runs} identical runs of one session on one input,"
            " each chunk's runs compared bitwise with its first; max |diff| is the run-to-run spread",
            threshold_rule=rule.threshold_rule,
            rule_detail=rule.describe(),
            graph_level=level,
            graph_level_detail=f"level {level}, the model's tensors exposed",
            graph_view="model",
            nondeterministic_reference=tuple(moving),
            top=top_nodes(result.profile),
            profile=tuple(result.profile),
            runs=runner.runs,
            seconds=time.perf_counter() - started,
            complete=result.complete,
            rel_threshold=rule.rel_threshold,
            abs_floor=rule.abs_floor,
            nodes_total=len(model.graph.node),
            skipped=result.skipped,
            notes=tuple(result.notes) + tuple(notes),
        )
