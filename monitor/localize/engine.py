"""Localize a drift: re-run one input with the model's tensors exposed and name the nodes that moved.

Two sides are compared tensor by tensor, matched by name: the *subject* (the production
providers and session options) and a reference: ``baseline`` (intermediates stored by
``capture_intermediates`` when the baseline was taken), ``unoptimized`` (the same model on the CPU
provider with graph optimizations disabled) or ``model`` (another model file, e.g. the fp32 build
of an fp16 or QDQ subject, run like ``unoptimized``). The rules are in ``rule.py``, the searches
(``all``, ``bisect``) and the two answers in ``search.py``.

Only the model's own tensors are exposed and compared, so every answer names a node of the model
(never a node of ORT's optimized graph such as ``ReorderOutput_*`` or ``*/MatmulTransposeFusion/``).
Exposing a tensor as a graph output can stop ORT's fusions and layout passes and change the numbers
(the observer effect). Every exposed run's final outputs are checked bitwise against a plain run at
the same optimization level (at capture, every chunk is also run twice and must repeat bitwise:
some fused kernels give other bits when the exposed set changes); on a difference the exposed
graph is run one level lower (``all`` ->
``extended`` -> ``basic`` -> ``disable``), where exposing no longer changes what is computed, and
the report says so (``graph_level``, ``graph_level_detail``). Stored intermediates record the level
they were captured at (the entry ``onnxmon:graph_level``) and localization against them runs at
that level, which is what makes a bitwise comparison meaningful.

*Changed* is bitwise when the caller says the stack and session settings are the baseline's
(``same_stack``); otherwise the subject is run twice and its spread is the noise floor. A
reference that runs (``unoptimized``, ``model``) is always run twice; a spread there is reported
as a nondeterministic reference and becomes the floor.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

import numpy as np

from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.errors import MonitorError
from monitor.localize.graph import ExposingRunner, StoredTensors, load_model, node_outputs
from monitor.localize.plot import plot_svg
from monitor.localize.report import LocalizationReport, NodeDivergence, top_nodes
from monitor.localize.rule import DEFAULT_TOLERANCE, Rule, ThresholdRule, tensor_error
from monitor.localize.search import Budget, ObserverEffect, Repeated, Search, SearchResult, TensorSource
from monitor.localize.sqnr import LayerSQNR, per_layer_sqnr
from monitor.results import AppliedTolerance
from monitor.runtime.session import Session

__all__ = [
    "LEVEL_KEY",
    "LayerSQNR",
    "LocalizationReport",
    "NodeDivergence",
    "capture_intermediates",
    "localize",
    "per_layer_sqnr",
    "plot_svg",
    "tensor_error",
]

Against = Literal["baseline", "unoptimized", "model"]
AUTO_BISECT_NODES = 300
LEVELS = ("all", "layout", "extended", "basic", "disable")
LEVEL_KEY = "onnxmon:graph_level"  # the reserved entry of stored intermediates: the level they ran at
# The reserved entry of intermediates made by another framework (``onnxmon reference torch``: "torch").
# No two implementations agree bitwise, so *changed* there means above float rounding: more than
# FOREIGN_FLOOR times the tensor's largest magnitude; the subject runs once (a nondeterministic
# subject, e.g. a Dropout exported in training mode, is then a difference from the reference).
FOREIGN_KEY = "onnxmon:reference"
FOREIGN_FLOOR = 1e-5
REFERENCE_PROVIDERS = (ProviderSpec(name="CPUExecutionProvider"),)
REFERENCE_SESSION = SessionConfig(graph_optimization_level="disable")


def localize(
    model_path: Path,
    feeds: Mapping[str, np.ndarray],
    *,
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
    against: str | None = None,
    reference_model_path: Path | None = None,
    reference_intermediates: Mapping[str, np.ndarray] | None = None,
    same_stack: bool = True,
    mode: Literal["auto", "all", "bisect"] = "auto",
    graph_level: str | None = None,
    threshold_rule: ThresholdRule = "tolerance",
    tolerance: AppliedTolerance = DEFAULT_TOLERANCE,
    chunk_size: int = 64,
    rel_threshold: float = 0.01,
    abs_floor: float = 1e-6,
    time_budget_s: float | None = None,
) -> LocalizationReport:
    """Name the first node that changed and the first out of tolerance, both nodes of ``model_path``.

    ``against`` defaults to ``model`` when ``reference_model_path`` is given, else ``unoptimized``.
    ``mode="auto"`` bisects graphs of more than 300 nodes and scans all nodes otherwise.
    ``time_budget_s`` stops the search when exceeded; the report then says ``complete=False``.
    """
    if against is None:
        against = "model" if reference_model_path is not None else "unoptimized"
    side: Against = "unoptimized" if against == "reference" else against  # type: ignore[assignment]
    _validate(side, reference_model_path, reference_intermediates, mode, chunk_size, graph_level, threshold_rule)
    if not rel_threshold > 0 or not abs_floor >= 0:
        raise MonitorError(f"localize: rel_threshold must be > 0 and abs_floor >= 0, got {rel_threshold}, {abs_floor}")
    started = time.perf_counter()
    model_path = Path(model_path)
    model = load_model(model_path)
    search_mode: Literal["all", "bisect"] = (
        ("bisect" if len(model.graph.node) > AUTO_BISECT_NODES else "all") if mode == "auto" else mode
    )
    rule = Rule(threshold_rule, tolerance, rel_threshold, abs_floor, cast_floats=side == "model")
    budget = Budget(started, time_budget_s)
    stored_level: str | None = None
    foreign: str | None = None
    with ExitStack() as stack:
        reference: TensorSource
        noise: dict[str, float] = {}
        if side == "baseline":
            assert reference_intermediates is not None  # checked by _validate
            stored = dict(reference_intermediates)
            level_entry = stored.pop(LEVEL_KEY, None)
            stored_level = str(np.asarray(level_entry).item()) if level_entry is not None else None
            foreign_entry = stored.pop(FOREIGN_KEY, None)
            foreign = str(np.asarray(foreign_entry).item()) if foreign_entry is not None else None
            if foreign is not None:
                noise = {name: FOREIGN_FLOOR * _magnitude(value) for name, value in stored.items()}
            reference = StoredTensors(stored)
        else:
            runner = stack.enter_context(
                ExposingRunner(
                    load_model(reference_model_path or model_path),
                    feeds,
                    providers=REFERENCE_PROVIDERS,
                    session=REFERENCE_SESSION,
                    label="reference",
                )
            )
            repeated = Repeated(runner)
            reference, noise = repeated, repeated.noise
        levels, level_why = _levels(session, graph_level, stored_level)
        bitwise = (
            side == "baseline"
            and same_stack
            and foreign is None
            and (stored_level is None or stored_level == levels[0])
        )
        details: list[str] = []
        runs = 0
        for position, level in enumerate(levels):
            at_level = session.model_copy(update={"graph_optimization_level": level})
            plain = Session(model_path, providers, at_level).run(feeds, where="localization feeds")
            runner = stack.enter_context(
                ExposingRunner(model, feeds, providers=providers, session=at_level, production=plain)
            )
            subject: TensorSource = runner
            if not bitwise and side == "baseline" and foreign is None:
                repeated = Repeated(runner)
                subject, noise = repeated, repeated.noise
            engine = Search(
                runner.nodes,
                runner.final_outputs,
                subject,
                reference,
                chunk_size=chunk_size,
                rule=rule,
                budget=budget,
                stop_on_observer=position < len(levels) - 1,
                noise=noise,
                pair_dequantized=side == "model",
            )
            try:
                result: SearchResult = engine.run_all() if search_mode == "all" else engine.run_bisect()
            except ObserverEffect:
                details.append(f"at level {level}: {runner.observer_mismatch}")
                runs += 1 + runner.runs
                continue
            runs += 1 + runner.runs + reference.runs
            if runner.observer_mismatch:
                details.append(f"at level {level} (kept): {runner.observer_mismatch}")
            break
        level_detail = _level_detail(level_why, details, level)
        nondeterministic = tuple(sorted(n for n, v in noise.items() if v > 0)) if side != "baseline" else ()
        return LocalizationReport(
            model=model_path.name,
            against=side,
            reference_model=str(reference_model_path) if side == "model" else "",
            mode=search_mode,
            first_changed=result.first_changed,
            first_out_of_tolerance=result.first_out_of_tolerance,
            comparison="bitwise" if bitwise else "noise_floor",
            comparison_detail=_comparison_detail(side, bitwise, same_stack, stored_level, level, noise)
            if foreign is None
            else f"against a {foreign} reference: changed means above float rounding ({FOREIGN_FLOOR:g} x the"
            " tensor's largest magnitude); the subject ran once",
            threshold_rule=threshold_rule,
            rule_detail=rule.describe(),
            graph_level=level,
            graph_level_detail=level_detail,
            nondeterministic_reference=nondeterministic,
            top=top_nodes(result.profile),
            profile=tuple(result.profile),
            runs=runs,
            seconds=time.perf_counter() - started,
            complete=result.complete,
            rel_threshold=rel_threshold,
            abs_floor=abs_floor,
            nodes_total=len(model.graph.node),
            skipped=result.skipped,
            notes=tuple(result.notes)
            + ((f"the reference is nondeterministic: {len(nondeterministic)} tensor(s) differ between two runs",)
               if nondeterministic else ()),
        )  # fmt: skip


def capture_intermediates(
    model_path: Path,
    feeds: Mapping[str, np.ndarray],
    *,
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
    chunk_size: int = 64,
    graph_level: str | None = None,
) -> dict[str, np.ndarray]:
    """Every tensor of the model (node outputs and final outputs) as the exposed graph computes it.

    Stored with a baseline so a later drift can be localized ``against="baseline"``. The exposed
    graph runs at the production level, or lower where exposing changes the final outputs there or
    where two exposed passes are not bitwise equal (see the module docstring); the level is stored
    under ``LEVEL_KEY``.
    """
    _check_chunk_size(chunk_size)
    model_path = Path(model_path)
    model = load_model(model_path)
    names = node_outputs(model)
    levels, _ = _levels(session, graph_level, None)
    for position, level in enumerate(levels):
        last = position == len(levels) - 1
        at_level = session.model_copy(update={"graph_optimization_level": level})
        plain = Session(model_path, providers, at_level).run(feeds, where="capture feeds")
        with ExposingRunner(model, feeds, providers=providers, session=at_level, production=plain) as runner:
            source = Repeated(runner)
            wanted = [n for n in names if n in runner.producible]
            captured: dict[str, np.ndarray] = {}
            for start in range(0, len(wanted), chunk_size):
                captured.update(source.fetch(wanted[start : start + chunk_size]))
                faithful = not runner.observer_mismatch and not any(source.noise.values())
                if not faithful and not last:
                    break
            else:
                return {**plain, **captured, LEVEL_KEY: np.array(level)}
    raise AssertionError("unreachable: the last level always returns")


def _magnitude(value: np.ndarray) -> float:
    array = np.asarray(value)
    if array.dtype.kind not in "fiu" or array.size == 0:
        return 0.0
    finite = np.abs(array[np.isfinite(array)].astype(np.float64)) if array.dtype.kind == "f" else np.abs(array)
    return float(finite.max()) if finite.size else 0.0


def _levels(session: SessionConfig, chosen: str | None, stored: str | None) -> tuple[list[str], str]:
    """The levels to try, highest first, and why they start where they do."""
    if chosen is not None:
        return [chosen], f"level {chosen}, as asked (--graph-level)"
    if stored is not None:
        return [stored], f"level {stored}, the level the baseline's intermediates were captured at"
    production = session.graph_optimization_level
    return list(LEVELS[LEVELS.index(production) :]), f"the production level ({production})"


def _level_detail(why: str, observer: list[str], level: str) -> str:
    if not observer:
        return f"{why}; exposing the model's tensors left the final outputs bitwise equal"
    dropped = [d for d in observer if "(kept)" not in d]
    text = why
    if dropped:
        text += (
            f"; exposing the model's tensors changed the final outputs ({'; '.join(dropped)}): ORT's fusions and"
            f" layout passes rewrite those tensors there, so the exposed graph ran at level {level}"
        )
    kept = [d for d in observer if "(kept)" in d]
    if kept:
        text += f"; the observer effect remains ({kept[0]}): numbers near the fused nodes may not be production's"
    return text


def _comparison_detail(
    side: str, bitwise: bool, same_stack: bool, stored: str | None, level: str, noise: Mapping[str, float]
) -> str:
    if bitwise:
        return "the stack, session settings and graph level match the baseline's: replays are bitwise reproducible"
    floor = max(noise.values(), default=0.0)
    if side == "baseline":
        why = "the environment or session settings differ from the baseline's" if not same_stack else ""
        if stored is not None and stored != level:
            why = why or f"the baseline's intermediates ran at level {stored}, this run at {level}"
        return (
            f"{why or 'no bitwise guarantee'}: changed means above the subject's spread over two runs (max {floor:.3g})"
        )
    return (
        f"against a different execution ({side}): changed means above the reference's spread over two runs"
        f" (max {floor:.3g})"
    )


def _validate(
    against: str,
    reference_model_path: Path | None,
    reference_intermediates: Mapping[str, np.ndarray] | None,
    mode: str,
    chunk_size: int,
    graph_level: str | None,
    threshold_rule: str,
) -> None:
    if against not in ("baseline", "unoptimized", "model"):
        raise MonitorError(f"localize: against must be 'baseline', 'unoptimized' or 'model', got {against!r}")
    if against == "baseline" and not reference_intermediates:
        raise MonitorError(
            "localize against='baseline' needs the baseline's intermediates; capture them with"
            " `baseline capture --intermediates`"
        )
    if (against == "model") != (reference_model_path is not None):
        raise MonitorError("localize: a reference model path goes with against='model' (and only with it)")
    if mode not in ("auto", "all", "bisect"):
        raise MonitorError(f"localize: mode must be 'auto', 'all' or 'bisect', got {mode!r}")
    if graph_level is not None and graph_level not in LEVELS:
        raise MonitorError(f"localize: graph level must be one of {', '.join(LEVELS)}, got {graph_level!r}")
    if threshold_rule not in ("tolerance", "std"):
        raise MonitorError(f"localize: threshold rule must be 'tolerance' or 'std', got {threshold_rule!r}")
    _check_chunk_size(chunk_size)


def _check_chunk_size(chunk_size: int) -> None:
    if chunk_size < 1:
        raise MonitorError(f"localize: chunk_size must be >= 1, got {chunk_size}")
