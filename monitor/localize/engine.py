"""Localize a drift: re-run one input with the model's tensors exposed and name the nodes that moved.

Two sides are compared tensor by tensor, matched by name: the *subject* (the production
providers and session options) and a reference: ``baseline`` (intermediates stored by
``capture_intermediates`` when the baseline was taken), ``unoptimized`` (the same model on the CPU
provider with graph optimizations disabled) or ``model`` (another model file, e.g. the fp32 build
of an fp16 or QDQ subject, run like ``unoptimized``). The rules are in ``rule.py``, the searches
(``all``, ``bisect``) and the two answers in ``search.py``.

Only the model's tensors are compared, so every answer names a node of the model (never a node of
ORT's optimized graph such as ``ReorderOutput_*`` or ``*/MatmulTransposeFusion/``). Exposing a
tensor of the model as a graph output can stop ORT's fusions and layout passes and change the
numbers (the observer effect), and an exposed tensor can even hold another value depending on which
others are exposed with it. So by default the graph ORT really runs at the production level is
exposed, mapped back to the model (``graph_view: optimized``: a fused node's tensor is reported on
the model node that produces it, with ``optimized_node`` and ``fused_from``); the model's own
tensors are exposed where that graph keeps too few of them, and only where that changes the final
outputs too does the exposed graph run a level lower (``levels.py``). Every exposed run's final
outputs are checked bitwise against a plain run at the same level (at capture, every chunk is also
run twice and must repeat bitwise); the report says which level and view and why (``graph_level``,
``graph_view``, ``graph_level_detail``). Stored intermediates record the level and view they were
captured at (the entry ``onnxmon:graph_level``, e.g. ``all:optimized``) and localization against
them runs the same way, which is what makes a bitwise comparison meaningful.

*Changed* is bitwise when the caller says the stack and session settings are the baseline's
(``same_stack``); otherwise the subject is run twice and its spread is the noise floor. A
reference that runs (``unoptimized``, ``model``) is run twice the first time for a reference file
and input, and its per-tensor spread kept while the file is unchanged (``noisefloor.py``), so a
later localization against it runs it once; a spread there is reported as a nondeterministic
reference and becomes the floor.
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
from monitor.localize import noisefloor
from monitor.localize.graph import (
    ExposingRunner,
    StoredTensors,
    graph_nodes,
    load_model,
    load_model_and_data_files,
    node_outputs,
    refuse_disjoint,
)
from monitor.localize.levels import (
    OPTIMIZED_SUFFIX,
    View,
    attempts,
    below_production_note,
    comparison_detail,
    exposed_subject,
    level_detail,
    levels_to_try,
    production_outputs_agree,
    view_label,
)
from monitor.localize.plot import plot_svg
from monitor.localize.report import LocalizationReport, NodeDivergence, top_nodes
from monitor.localize.request import LocalizeRequest
from monitor.localize.rule import DEFAULT_TOLERANCE, Rule, tensor_error
from monitor.localize.search import DEQUANTIZED_SUFFIX as _DQ
from monitor.localize.search import Budget, ObserverEffect, Search, SearchResult
from monitor.localize.sources import Repeated, TensorSource
from monitor.localize.sqnr import LayerSQNR, per_layer_sqnr
from monitor.results import AppliedTolerance

__all__ = [
    "LEVEL_KEY",
    "LayerSQNR",
    "LocalizationReport",
    "LocalizeRequest",
    "NodeDivergence",
    "capture_intermediates",
    "localize",
    "per_layer_sqnr",
    "plot_svg",
    "tensor_error",
]

Against = Literal["baseline", "unoptimized", "model"]
DEFAULT_REQUEST = LocalizeRequest()
AUTO_BISECT_NODES = 300
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
    request: LocalizeRequest = DEFAULT_REQUEST,
    *,
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
    reference_intermediates: Mapping[str, np.ndarray] | None = None,
    reference_outputs: Mapping[str, np.ndarray] | None = None,
    same_stack: bool = True,
    tolerance: AppliedTolerance = DEFAULT_TOLERANCE,
) -> LocalizationReport:
    """Name the first node that changed and the first out of tolerance, both nodes of ``model_path``.

    The options are the ``request``'s (validated when it was built; ``request.py``); its ``sample``
    is the caller's (``feeds`` are that sample) and ``against="self"`` is ``selfruns.localize_self``'s.
    ``against="auto"`` is ``model`` when the request names a reference model, else ``unoptimized``.
    ``mode="auto"`` bisects graphs of more than 300 nodes and scans all nodes otherwise.
    The rest is what the caller's configuration and baseline say: the production ``providers`` and
    ``session``, the check's ``tolerance``, the baseline's ``reference_intermediates`` (for
    ``against="baseline"``) and whether this is the baseline's stack (``same_stack``).
    ``reference_outputs`` (the baseline's outputs of this sample: the check's yardstick) keep the answer
    consistent with the check: when the exposed graph had to run below the first level tried and the
    plain graph at that level keeps every final output in tolerance, a node out of tolerance only
    below it is reported as a note, not as ``first_out_of_tolerance``.
    """
    against = request.against
    if against == "auto":
        against = "model" if request.reference_model is not None else "unoptimized"
    if against == "self":
        raise MonitorError("localize: against='self' compares identical runs: selfruns.localize_self takes it")
    side: Against = "unoptimized" if against == "reference" else against
    if side == "baseline" and not reference_intermediates:
        raise MonitorError(
            "localize against='baseline' needs the baseline's intermediates; capture them with"
            " `baseline capture --intermediates`"
        )
    reference_model_path = request.reference_model
    mode, graph_level, graph_view, threshold_rule = (
        request.mode,
        request.graph_level,
        request.graph_view,
        request.threshold_rule,
    )
    chunk_size, rel_threshold, abs_floor = request.chunk_size, request.rel_threshold, request.abs_floor
    time_budget_s = request.time_budget_s
    started = time.perf_counter()
    model_path = Path(model_path)
    model = load_model(model_path)
    search_mode: Literal["all", "bisect"] = (
        ("bisect" if len(model.graph.node) > AUTO_BISECT_NODES else "all") if mode == "auto" else mode
    )
    # Float tensors of different float dtypes (an fp16 build against fp32 intermediates or a PyTorch
    # reference) are compared by value in float64, as the check compares outputs, on every side.
    rule = Rule(threshold_rule, tolerance, rel_threshold, abs_floor, cast_floats=True)
    budget = Budget(started, time_budget_s)
    stored_level: str | None = None
    foreign: str | None = None
    with ExitStack() as stack:
        reference: TensorSource
        noise: dict[str, float] = {}
        if side == "baseline":
            assert reference_intermediates is not None  # checked above
            stored = dict(reference_intermediates)
            level_entry = stored.pop(LEVEL_KEY, None)
            stored_level = str(np.asarray(level_entry).item()) if level_entry is not None else None
            foreign_entry = stored.pop(FOREIGN_KEY, None)
            foreign = str(np.asarray(foreign_entry).item()) if foreign_entry is not None else None
            if foreign is not None:
                noise = {name: FOREIGN_FLOOR * _magnitude(value) for name, value in stored.items()}
            # Replay the way the capture ran: its level and view (captures older than the optimized
            # view exposed the model's tensors); an explicit graph_view is the caller's choice.
            captured_view: View = "model"
            if stored_level is not None and stored_level.endswith(OPTIMIZED_SUFFIX):
                stored_level, captured_view = stored_level.removesuffix(OPTIMIZED_SUFFIX), "optimized"
            if graph_view == "auto":
                graph_view = captured_view
            reference = StoredTensors(stored)
        else:
            reference_path = Path(reference_model_path or model_path)
            reference_proto, data_files = load_model_and_data_files(reference_path)
            runner = stack.enter_context(
                ExposingRunner(
                    reference_proto,
                    feeds,
                    providers=REFERENCE_PROVIDERS,
                    session=REFERENCE_SESSION,
                    label="reference",
                )
            )
            if side == "model":  # a reference sharing no tensor name would compare nothing: "first changed none"
                refuse_disjoint(model, str(model_path), str(reference_model_path), runner.producible, _DQ)
            # Its noise floor is measured once per reference file and input, then kept (noisefloor.py).
            key = noisefloor.reference_key(reference_path, data_files, feeds, REFERENCE_PROVIDERS, REFERENCE_SESSION)
            kept = noisefloor.KeptNoise(runner, key)
            reference, noise = kept, kept.noise
        levels, level_why = levels_to_try(session, graph_level, stored_level)
        bitwise = (
            side == "baseline"
            and same_stack
            and foreign is None
            and (stored_level is None or stored_level == levels[0])
        )
        details: list[str] = []
        dropped: list[str] = []
        runs = 0
        tries = attempts(levels, graph_view)
        for position, (level, view) in enumerate(tries):
            at_level = session.model_copy(update={"graph_optimization_level": level})
            last = position == len(tries) - 1
            subject_runner, origins, why, _ = exposed_subject(
                stack, model_path, model, feeds, providers, at_level, view, require_kept=not last
            )
            if subject_runner is None:
                dropped.append(f"at level {level}: {why}")
                continue
            subject: TensorSource = subject_runner
            if not bitwise and side == "baseline" and foreign is None:
                repeated = Repeated(subject_runner)
                subject, noise = repeated, repeated.noise
            engine = Search(
                graph_nodes(model),
                tuple(o.name for o in model.graph.output),
                subject,
                reference,
                chunk_size=chunk_size,
                rule=rule,
                budget=budget,
                stop_on_observer=position < len(tries) - 1,
                noise=noise,
                pair_dequantized=side == "model",
                origins=origins,
            )
            try:
                result: SearchResult = engine.run_all() if search_mode == "all" else engine.run_bisect()
            except ObserverEffect:
                details.append(f"at level {level}{view_label(view)}: {subject_runner.observer_mismatch}")
                runs += 1 + subject_runner.runs
                continue
            runs += 1 + subject_runner.runs + reference.runs
            if subject_runner.observer_mismatch:
                details.append(f"at level {level}{view_label(view)} (kept): {subject_runner.observer_mismatch}")
            break
        level_text = level_detail(level_why, details, level, view, dropped, why)
        below: tuple[str, ...] = ()
        first_out = result.first_out_of_tolerance
        if first_out is not None and level != levels[0]:
            outputs = reference_outputs or reference.fetch(o.name for o in model.graph.output)
            at_check = session.model_copy(update={"graph_optimization_level": levels[0]})
            if production_outputs_agree(model_path, feeds, providers, at_check, outputs, rule):
                below, first_out = (below_production_note(first_out, level, levels[0]),), None
        nondeterministic = tuple(sorted(n for n, v in noise.items() if v > 0)) if side != "baseline" else ()
        return LocalizationReport(
            model=model_path.name,
            against=side,
            reference_model=str(reference_model_path) if side == "model" else "",
            mode=search_mode,
            first_changed=result.first_changed,
            first_out_of_tolerance=first_out,
            comparison="bitwise" if bitwise else "noise_floor",
            comparison_detail=comparison_detail(side, bitwise, same_stack, stored_level, level, noise)
            if foreign is None
            else f"against a {foreign} reference: changed means above float rounding ({FOREIGN_FLOOR:g} x the"
            " tensor's largest magnitude); the subject ran once",
            threshold_rule=threshold_rule,
            rule_detail=rule.describe(),
            graph_level=level,
            graph_level_detail=level_text,
            graph_view=view,
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
            + below
            + (
                (f"the reference is nondeterministic: {len(nondeterministic)} tensor(s) differ between two runs",)
                if nondeterministic
                else ()
            ),
        )


def capture_intermediates(
    model_path: Path,
    feeds: Mapping[str, np.ndarray],
    *,
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
    chunk_size: int = 64,
    graph_level: str | None = None,
    graph_view: View = "auto",
) -> dict[str, np.ndarray]:
    """Every tensor of the model (node outputs and final outputs) as the exposed graph computes it.

    Stored with a baseline so a later drift can be localized ``against="baseline"``. The exposed
    graph runs at the production level, or lower where exposing changes the final outputs there or
    where two exposed passes are not bitwise equal (see the module docstring); the level is stored
    under ``LEVEL_KEY``.
    """
    _check_chunk_size(chunk_size)
    _check_view(graph_view)
    model_path = Path(model_path)
    model = load_model(model_path)
    names = node_outputs(model)
    levels, _ = levels_to_try(session, graph_level, None)
    tries = attempts(levels, graph_view)
    for position, (level, view) in enumerate(tries):
        last = position == len(tries) - 1
        at_level = session.model_copy(update={"graph_optimization_level": level})
        with ExitStack() as stack:
            runner, _, _, plain = exposed_subject(
                stack, model_path, model, feeds, providers, at_level, view, require_kept=not last
            )
            if runner is None:
                continue
            source = Repeated(runner, every_fetch=True)  # two exposed passes must agree to the bit
            wanted = [n for n in names if n in runner.producible]
            captured: dict[str, np.ndarray] = {}
            for start in range(0, len(wanted), chunk_size):
                captured.update(source.fetch(wanted[start : start + chunk_size]))
                faithful = not runner.observer_mismatch and not any(source.noise.values())
                if not faithful and not last:
                    break
            else:
                stored = level + (OPTIMIZED_SUFFIX if view == "optimized" else "")
                return {**plain, **captured, LEVEL_KEY: np.array(stored)}
    raise AssertionError("unreachable: the last level always returns")


def _magnitude(value: np.ndarray) -> float:
    array = np.asarray(value)
    if array.dtype.kind not in "fiu" or array.size == 0:
        return 0.0
    finite = np.abs(array[np.isfinite(array)].astype(np.float64)) if array.dtype.kind == "f" else np.abs(array)
    return float(finite.max()) if finite.size else 0.0


def _check_view(view: str) -> None:
    if view not in ("auto", "model", "optimized"):
        raise MonitorError(f"localize: graph view must be 'auto', 'model' or 'optimized', got {view!r}")


def _check_chunk_size(chunk_size: int) -> None:
    if chunk_size < 1:
        raise MonitorError(f"localize: chunk_size must be >= 1, got {chunk_size}")
