"""Localize a drift: re-run one input with intermediate tensors exposed and name the first node that moved.

Two sides are compared tensor by tensor, matched by name: the *subject* (the production
configuration: same providers, same session options) and either a *reference* (CPU
execution provider with graph optimizations disabled, on the same model or on
``reference_model_path``, e.g. the fp32 model of an fp16 or QDQ subject) or a *baseline*
(intermediates stored by ``capture_intermediates`` when the baseline was taken). The
divergence rule is in ``report``; the searches (``all``, ``bisect``) in
``search``.

Observer effect: exposing a tensor as a graph output can stop ONNX Runtime's fusions and
change the numbers. Every exposed subject run's final outputs are checked bitwise against
the plain production run. On a difference we take the *fusion-faithful* path: save the
graph ORT really runs (``optimized_model_filepath`` at the production optimization level),
expose the outputs of *its* nodes and run it with optimizations disabled, so the numbers
localized are the production numbers (checked again, and reported if they still differ).
Fused nodes usually keep the name of the last original output, which is how they match the
reference. The report says which path was used.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

import numpy as np

from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.errors import MonitorError
from monitor.localize.graph import ExposingRunner, StoredTensors, load_model, node_outputs, save_optimized_model
from monitor.localize.plot import plot_svg
from monitor.localize.report import LocalizationReport, NodeDivergence, tensor_error, top_nodes
from monitor.localize.search import Budget, ObserverEffect, Search, SearchResult
from monitor.localize.sqnr import LayerSQNR, per_layer_sqnr
from monitor.runtime.session import Session

__all__ = [
    "LayerSQNR",
    "LocalizationReport",
    "NodeDivergence",
    "capture_intermediates",
    "localize",
    "per_layer_sqnr",
    "plot_svg",
    "tensor_error",
]

AUTO_BISECT_NODES = 300
REFERENCE_PROVIDERS = (ProviderSpec(name="CPUExecutionProvider"),)
REFERENCE_SESSION = SessionConfig(graph_optimization_level="disable")


def localize(
    model_path: Path,
    feeds: Mapping[str, np.ndarray],
    *,
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
    against: Literal["reference", "baseline"] = "reference",
    reference_model_path: Path | None = None,
    reference_intermediates: Mapping[str, np.ndarray] | None = None,
    mode: Literal["auto", "all", "bisect"] = "auto",
    chunk_size: int = 64,
    rel_threshold: float = 0.01,
    abs_floor: float = 1e-6,
    time_budget_s: float | None = None,
) -> LocalizationReport:
    """Name the first node whose output moved by more than ``rel_threshold`` of its reference spread.

    ``mode="auto"`` bisects graphs of more than 300 nodes and scans all nodes otherwise.
    ``time_budget_s`` stops the search when exceeded; the report then says ``complete=False``.
    """
    _validate(against, reference_model_path, reference_intermediates, mode, chunk_size, rel_threshold, abs_floor)
    started = time.perf_counter()
    model_path = Path(model_path)
    production = Session(model_path, providers, session).run(feeds, where="localization feeds")
    model = load_model(model_path)
    search_mode: Literal["all", "bisect"] = (
        ("bisect" if len(model.graph.node) > AUTO_BISECT_NODES else "all") if mode == "auto" else mode
    )
    budget = Budget(started, time_budget_s)
    with ExitStack() as stack:
        if against == "reference":
            reference_model = load_model(reference_model_path or model_path)
            reference_source: ExposingRunner | StoredTensors = stack.enter_context(
                ExposingRunner(
                    reference_model, feeds, providers=REFERENCE_PROVIDERS, session=REFERENCE_SESSION, label="reference"
                )
            )
        else:
            assert reference_intermediates is not None  # checked by _validate
            reference_source = StoredTensors(reference_intermediates)
        subject = stack.enter_context(
            ExposingRunner(model, feeds, providers=providers, session=session, production=production)
        )

        def search(source: ExposingRunner, stop_on_observer: bool) -> SearchResult:
            engine = Search(
                source.nodes,
                source.final_outputs,
                source,
                reference_source,
                chunk_size=chunk_size,
                rel_threshold=rel_threshold,
                abs_floor=abs_floor,
                budget=budget,
                stop_on_observer=stop_on_observer,
            )
            return engine.run_all() if search_mode == "all" else engine.run_bisect()

        path: Literal["direct", "fusion_faithful"] = "direct"
        detail = ""
        try:
            result = search(subject, stop_on_observer=True)
        except ObserverEffect:
            detail = subject.observer_mismatch or "final outputs changed when intermediates were exposed"
            faithful = stack.enter_context(_faithful_runner(model_path, feeds, providers, session, production))
            subject_runs = subject.runs
            subject = faithful
            subject.runs += subject_runs
            result = search(subject, stop_on_observer=False)
            path = "fusion_faithful"
            detail += "; localized on ORT's optimized graph run with optimizations disabled"
            if subject.observer_mismatch:
                detail += f"; the fusion-faithful run still differs from production: {subject.observer_mismatch}"
            else:
                detail += " (final outputs match production bitwise)"
        return LocalizationReport(
            model=model_path.name,
            against=against,
            mode=search_mode,
            path=path,
            observer_effect=path == "fusion_faithful",
            observer_detail=detail,
            first=result.first,
            top=top_nodes(result.profile),
            profile=tuple(result.profile),
            runs=1 + subject.runs + reference_source.runs,
            seconds=time.perf_counter() - started,
            complete=result.complete,
            rel_threshold=rel_threshold,
            abs_floor=abs_floor,
            nodes_total=len(subject.nodes),
            skipped=result.skipped,
            notes=tuple(result.notes),
        )


def capture_intermediates(
    model_path: Path,
    feeds: Mapping[str, np.ndarray],
    *,
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
    chunk_size: int = 64,
) -> dict[str, np.ndarray]:
    """Every node output (and final output) as production computes it, by tensor name.

    Stored with a baseline so a later drift can be localized ``against="baseline"``. If
    exposing changes the production outputs (observer effect), the tensors come from the
    fusion-faithful run of ORT's optimized graph, restricted to names of the original model.
    """
    _check_chunk_size(chunk_size)
    model_path = Path(model_path)
    production = Session(model_path, providers, session).run(feeds, where="capture feeds")
    model = load_model(model_path)
    original_names = node_outputs(model)
    with ExposingRunner(model, feeds, providers=providers, session=session, production=production) as runner:
        captured = _capture(runner, original_names, chunk_size, stop_on_observer=True)
    if captured is None:
        with _faithful_runner(model_path, feeds, providers, session, production) as faithful:
            captured = _capture(faithful, original_names, chunk_size, stop_on_observer=False) or {}
    return {**captured, **production}


def _capture(
    runner: ExposingRunner, names: Sequence[str], chunk_size: int, *, stop_on_observer: bool
) -> dict[str, np.ndarray] | None:
    wanted = [n for n in names if n in runner.producible]
    captured: dict[str, np.ndarray] = {}
    for start in range(0, len(wanted), chunk_size):
        captured.update(runner.fetch(wanted[start : start + chunk_size]))
        if stop_on_observer and runner.observer_mismatch:
            return None
    return captured


class _FaithfulRunner(ExposingRunner):
    """An ``ExposingRunner`` over ORT's saved optimized graph, which also removes that file's folder."""

    scratch: Path

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _faithful_runner(
    model_path: Path,
    feeds: Mapping[str, np.ndarray],
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
    production: Mapping[str, np.ndarray],
) -> _FaithfulRunner:
    scratch = Path(tempfile.mkdtemp(prefix="onnxmon-optimized-"))
    try:
        optimized = load_model(save_optimized_model(model_path, providers, session, scratch))
        unoptimized = session.model_copy(update={"graph_optimization_level": "disable"})
        runner = _FaithfulRunner(
            optimized, feeds, providers=providers, session=unoptimized, production=production, label="fusion-faithful"
        )
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    runner.scratch = scratch
    return runner


def _validate(
    against: str,
    reference_model_path: Path | None,
    reference_intermediates: Mapping[str, np.ndarray] | None,
    mode: str,
    chunk_size: int,
    rel_threshold: float,
    abs_floor: float,
) -> None:
    if against not in ("reference", "baseline"):
        raise MonitorError(f"localize: against must be 'reference' or 'baseline', got {against!r}")
    if against == "baseline" and not reference_intermediates:
        raise MonitorError(
            "localize against='baseline' needs the baseline's intermediates; capture them with"
            " `baseline capture --intermediates`"
        )
    if against == "baseline" and reference_model_path is not None:
        raise MonitorError("localize: reference_model_path applies to against='reference' only")
    if mode not in ("auto", "all", "bisect"):
        raise MonitorError(f"localize: mode must be 'auto', 'all' or 'bisect', got {mode!r}")
    _check_chunk_size(chunk_size)
    if not rel_threshold > 0:
        raise MonitorError(f"localize: rel_threshold must be > 0, got {rel_threshold}")
    if not abs_floor >= 0:
        raise MonitorError(f"localize: abs_floor must be >= 0, got {abs_floor}")


def _check_chunk_size(chunk_size: int) -> None:
    if chunk_size < 1:
        raise MonitorError(f"localize: chunk_size must be >= 1, got {chunk_size}")
