"""Which graph localization exposes, at which optimization level, and how the report says why.

Exposing a tensor as a graph output can stop ORT's fusions and layout passes and change the numbers
(the observer effect). Each *attempt* is a (level, view) pair, best first: from the production level
down to ``disable``, and at each level first the graph ORT really runs there, saved and mapped back
to the model (``optimized``, ``optimized.py``), which exposing does not change, then the model's own
tensors (``model``). The optimized view is skipped when it keeps fewer than ``MIN_KEPT`` of the
model's tensors (too few to answer) or cannot be saved (an execution provider's compiled nodes).
The first attempt whose exposed runs leave the final outputs bitwise equal to a plain run is used.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

import numpy as np
import onnx

from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.localize.graph import ExposingRunner
from monitor.localize.optimized import Origin, optimized_runner
from monitor.localize.report import NodeDivergence
from monitor.localize.rule import Rule
from monitor.runtime.session import Session

View = Literal["auto", "model", "optimized"]
LEVELS = ("all", "layout", "extended", "basic", "disable")
MIN_KEPT = 0.25  # below this share of the model's tensors the optimized graph cannot answer
OPTIMIZED_SUFFIX = ":optimized"  # a stored level captured on the optimized graph, e.g. "all:optimized"


def levels_to_try(session: SessionConfig, chosen: str | None, stored: str | None) -> tuple[list[str], str]:
    """The levels to try, highest first, and why they start where they do."""
    if chosen is not None:
        return [chosen], f"level {chosen}, as asked (--graph-level)"
    if stored is not None:
        return [stored], f"level {stored}, the level the baseline's intermediates were captured at"
    production = session.graph_optimization_level
    return list(LEVELS[LEVELS.index(production) :]), f"the production level ({production})"


def level_detail(why: str, observer: list[str], level: str, view: str, dropped: list[str], mapped: str) -> str:
    text = why
    if not observer:
        text += (
            f"; exposing the {'optimized graph' if view == 'optimized' else 'model'}'s tensors left the final"
            " outputs bitwise equal"
        )
    dropped_observer = [d for d in observer if "(kept)" not in d]
    if dropped_observer:
        text += (
            f"; exposing tensors changed the final outputs ({'; '.join(dropped_observer)}): ORT's fusions and"
            f" layout passes rewrite those tensors there, so the exposed graph ran at level {level}"
            + (" as ORT optimizes it" if view == "optimized" else ", the model's own tensors exposed")
        )
    if dropped:
        text += f"; {'; '.join(dropped)}"
    if view == "optimized":
        text += f"; {mapped}, mapped back to the model's nodes (optimized_node, fused_from)"
    kept = [d for d in observer if "(kept)" in d]
    if kept:
        text += f"; the observer effect remains ({kept[0]}): numbers near the fused nodes may not be production's"
    return text


def attempts(levels: Sequence[str], view: View) -> list[tuple[str, View]]:
    """(level, view) pairs, best first: at each level the graph ORT runs there, then the model's tensors.

    The optimized graph comes first because exposing its tensors changes nothing: the model's
    tensors, exposed, can each hold another value depending on which others are exposed with them
    (a fusion whose output *is* the tensor happens only when its interior is not exposed), so a
    replay that exposes other sets than the capture did is not bitwise comparable.
    """
    found: list[tuple[str, View]] = []
    for level in levels:
        if view in ("auto", "optimized") and level != "disable":
            found.append((level, "optimized"))
        if view in ("auto", "model") or level == "disable":
            found.append((level, "model"))
    return found


def exposed_subject(
    stack: ExitStack,
    model_path: Path,
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
    view: View,
    *,
    require_kept: bool,
) -> tuple[ExposingRunner | None, Mapping[str, Origin], str, dict[str, np.ndarray]]:
    """The exposing runner of one attempt, the origins of its tensors, what the mapping kept, and the
    plain outputs at this level (``None`` for the runner when the optimized graph keeps too few of the
    model's tensors to answer, or cannot be saved)."""
    if view == "model":
        plain = Session(model_path, providers, session).run(feeds, where="localization feeds")
        runner = ExposingRunner(model, feeds, providers=providers, session=session, production=plain)
        return stack.enter_context(runner), {}, "", plain
    directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="onnxmon-optimized-")))
    try:
        runner, mapping, plain = optimized_runner(
            model_path, model, feeds, providers=providers, session=session, directory=directory
        )
    except Exception as exc:  # e.g. an execution provider whose compiled nodes cannot be saved
        if not require_kept:
            raise
        return None, {}, f"the optimized graph could not be saved and mapped ({type(exc).__name__}: {exc})"[:300], {}
    stack.enter_context(runner)
    if require_kept and mapping.kept < MIN_KEPT * mapping.total:
        return None, {}, f"{mapping.describe()}, too few to answer (fewer than {MIN_KEPT:.0%})", plain
    return runner, mapping.origins, mapping.describe(), plain


def view_label(view: str) -> str:
    return " (optimized graph)" if view == "optimized" else ""


def comparison_detail(
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


def production_outputs_agree(
    model_path: Path,
    feeds: Mapping[str, np.ndarray],
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
    reference_outputs: Mapping[str, np.ndarray],
    rule: Rule,
) -> bool:
    """Whether the plain graph at ``session``'s level (the check's) keeps every final output in tolerance.

    Only outputs the reference holds are judged; with none of them, False (nothing says it agrees).
    """
    produced = Session(model_path, providers, session).run(feeds, where="localization feeds")
    judged = [name for name in produced if name in reference_outputs]
    return bool(judged) and not any(
        rule.measure(name, produced[name], np.asarray(reference_outputs[name])).out_of_tolerance for name in judged
    )


def below_production_note(node: NodeDivergence, level: str, production: str) -> str:
    """What a node out of tolerance only at a lower level than the check's means: information."""
    return (
        f"information: at level {level}, where the exposed graph reproduces the outputs, {node.name}"
        f" ({node.op_type}) is out of tolerance, but at the check's level {production} the final outputs are"
        " within tolerance: ORT rewrites that part of the graph there (it removes Dropout, even in training"
        " mode, at level basic and above), so no node is out of tolerance where the check runs"
    )
