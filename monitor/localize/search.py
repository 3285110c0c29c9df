"""Finding the first divergent node: an exhaustive chunked scan and a bisection over the graph.

Both searches measure tensors through two sources with a ``fetch(names)`` method (an
``ExposingRunner`` or ``StoredTensors``): the *subject* and the *reference*. Only per-tensor
statistics are kept; the arrays of a chunk are dropped before the next one, so peak memory
is bounded by ``chunk_size`` tensors, not by the model. A source that measures its noise floor
(``sources.Repeated``) is told which tensors of each chunk differ from the other side.

Tensors are paired by name; an ORT-generated prefix (``InsertedPrecisionFreeCast_``) is stripped,
and against a *different* model a QDQ subject's ``T_DequantizeLinear_Output`` is paired with the
float model's ``T`` (its own ``T`` is not compared: after QDQ folding a ReLU, ``T`` may be the
pre-activation value).

Two answers are read off the measured tensors (``rule.py``): the first node whose output
*changed* while its inputs did not, and the first node *out of tolerance*. An unmeasured tensor
counts as changed when its producer read a changed one.

``all`` measures every tensor both sides produce, in topological order.

``bisect`` assumes a divergence *persists downstream*: once a tensor moved, the change
reaches the final outputs through the data flow. The predicate at position ``p`` is the
*cut* after node ``p`` (every tensor produced at or before ``p`` that is still consumed
after it, or is a graph output), which is monotone under that assumption even across
parallel branches. Since one run costs a full inference whatever it exposes, each round
probes as many evenly spaced cuts as fit in ``chunk_size`` tensors (a k-ary search; with
``chunk_size=1`` it is a plain binary search). The last round measures the remaining
bracket, the few nodes before it (a short linear scan that confirms the answer and catches
a divergence that faded out) and a sample of downstream nodes for the error-growth profile.
The bisection runs once for *changed* and once more, over what is already measured, for *out of
tolerance*.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from monitor.localize.graph import GraphNode
from monitor.localize.optimized import GENERATED_PREFIXES, Origin
from monitor.localize.report import NodeDivergence
from monitor.localize.rule import Rule, TensorError, needs_floor
from monitor.localize.sources import TensorSource, settle

CONFIRM_BEFORE = 3
GROWTH_SAMPLES = 16
DEQUANTIZED_SUFFIX = "_DequantizeLinear_Output"
Predicate = Literal["changed", "out_of_tolerance"]


class ObserverEffect(Exception):
    """The subject's final outputs changed when intermediates were exposed."""


class OutOfTime(Exception):
    """The time budget ran out; the search reports what it measured so far."""


@dataclass
class Budget:
    started: float
    seconds: float | None

    def check(self) -> None:
        if self.seconds is not None and time.perf_counter() - self.started > self.seconds:
            raise OutOfTime


@dataclass
class SearchResult:
    profile: list[NodeDivergence]
    first_changed: NodeDivergence | None
    first_out_of_tolerance: NodeDivergence | None
    complete: bool
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class Search:
    """Measures tensors on demand (each at most once) and turns them into per-node results."""

    def __init__(
        self,
        nodes: Sequence[GraphNode],
        final_outputs: Sequence[str],
        subject: TensorSource,
        reference: TensorSource,
        *,
        chunk_size: int,
        rule: Rule,
        budget: Budget,
        stop_on_observer: bool,
        noise: Mapping[str, float] | None = None,
        pair_dequantized: bool = False,
        origins: Mapping[str, Origin] | None = None,
    ) -> None:
        self.origins = origins or {}
        self.nodes = [n for n in nodes if n.op_type != "Constant"]
        self.subject, self.reference = subject, reference
        self.chunk_size = chunk_size
        self.rule = rule
        self.noise = noise if noise is not None else {}
        self.budget = budget
        self.stop_on_observer = stop_on_observer
        self.predicate: Predicate = "changed"
        self.alias = _aliases(subject.producible, reference.producible, pair_dequantized=pair_dequantized)
        self.matchable = frozenset(self.alias)
        self.candidates = [n for n in self.nodes if any(o in self.matchable for o in n.outputs)]
        self.errors: dict[str, TensorError] = {}
        self.skipped: dict[str, str] = {}
        self._producer = {out: n for n in nodes for out in n.outputs}
        self._op_types = {n.name: n.op_type for n in nodes}
        self._first_out: int | None = None  # the position of the first tensor found out of tolerance
        end = len(nodes)
        self._last_use: dict[str, int] = {name: end for name in final_outputs}
        for n in nodes:
            for name in n.inputs:
                self._last_use[name] = max(self._last_use.get(name, -1), n.index)

    # -- measuring ---------------------------------------------------------------------------

    def measure(self, names: Iterable[str], *, probing: bool = False) -> None:
        """Fetch and judge ``names``, a chunk per run. ``probing`` (a bisection round) stops judging at
        the first tensor out of tolerance, in topological order: the search looks no further than
        the first divergent cut, and the run is paid for either way; what is left unjudged stays
        unmeasured (never recorded as agreeing)."""
        todo = [n for n in dict.fromkeys(names) if n in self.subject.producible and n not in self.errors]
        todo = [n for n in todo if n not in self.skipped]
        for start in range(0, len(todo), self.chunk_size):
            self.budget.check()
            # The chunk is exposed whole, matchable or not: the same chunks as ``capture_intermediates``
            # exposed make the same graphs, which is what keeps a replay bitwise equal to the capture.
            exposed = todo[start : start + self.chunk_size]
            got = self.subject.fetch(exposed)
            if self.stop_on_observer and getattr(self.subject, "observer_mismatch", None):
                raise ObserverEffect
            chunk = sorted((name for name in exposed if name in self.matchable), key=self._position)
            if probing and self._first_out is not None:
                chunk = [name for name in chunk if self._position(name) <= self._first_out]
            want = self.reference.fetch(self.alias[name] for name in chunk)
            pairs = [(name, got.get(name), want.get(self.alias[name])) for name in chunk]
            differing = [n for n, a, b in pairs if a is not None and b is not None and needs_floor(self.rule, a, b)]
            del pairs
            settle(self.subject, differing)  # a side that measures its floor runs again only for these
            settle(self.reference, (self.alias[name] for name in differing))
            for name in chunk:
                if probing and self._first_out is not None and self._position(name) > self._first_out:
                    break
                reference = want.get(self.alias[name])
                if name not in got or reference is None:
                    self.skipped[name] = "not produced by both sides"
                    continue
                noise = max(self.noise.get(name, 0.0), self.noise.get(self.alias[name], 0.0))
                error = self.rule.measure(name, got[name], reference, noise)
                self.errors[name] = error
                if error.out_of_tolerance and (self._first_out is None or self._position(name) < self._first_out):
                    self._first_out = self._position(name)
            del got, want

    def _position(self, name: str) -> int:
        producer = self._producer.get(name)
        return producer.index if producer is not None else -1

    def taint(self) -> dict[str, bool]:
        """Per tensor, *changed*: measured ones by the rule; an unmeasured one if its producer read one.

        Graph inputs and initializers are clean: the same feeds go to both sides (a changed
        initializer belongs to the node that reads it).
        """
        changed: dict[str, bool] = {}
        for node in self.nodes:
            upstream = any(changed.get(i, False) for i in node.inputs)
            for out in node.outputs:
                changed[out] = self.errors[out].changed if out in self.errors else upstream
        return changed

    def node_result(self, node: GraphNode, taint: dict[str, bool]) -> NodeDivergence | None:
        measured = [self.errors[o] for o in node.outputs if o in self.errors]
        if not measured:
            return None
        worst = max(measured, key=lambda e: (e.out_of_tolerance, e.rel_error, e.max_abs_error))
        origin = next((self.origins[o] for o in node.outputs if o in self.origins), None)
        return NodeDivergence(
            index=node.index,
            name=node.name,
            op_type=node.op_type,
            outputs=node.outputs,
            max_abs_error=worst.max_abs_error,
            rel_error=worst.rel_error,
            threshold=worst.threshold,
            changed=any(e.changed for e in measured),
            out_of_tolerance=any(e.out_of_tolerance for e in measured),
            inputs_changed=any(taint.get(i, False) for i in node.inputs),
            reasons=tuple(dict.fromkeys(r for e in measured for r in e.reasons)),
            optimized_node=origin.optimized_node if origin else "",
            fused_from=origin.fused_from if origin else (),
            fused_op_types=tuple(self._op_types.get(n, "") for n in origin.fused_from) if origin else (),
        )

    def profile(self) -> list[NodeDivergence]:
        taint = self.taint()
        return [r for r in (self.node_result(n, taint) for n in self.nodes) if r is not None]

    def _cut(self, node: GraphNode) -> list[str]:
        live = [
            name
            for name, producer in self._producer.items()
            if name in self.matchable and producer.index <= node.index < self._last_use.get(name, -1)
        ]
        return [*live, *(o for o in node.outputs if o in self.matchable)]

    # -- searches ----------------------------------------------------------------------------

    def run_all(self) -> SearchResult:
        complete = True
        try:
            self.measure(name for node in self.nodes for name in node.outputs)
        except OutOfTime:
            complete = False
        return self._result(complete, [])

    def run_bisect(self) -> SearchResult:
        notes: list[str] = []
        if not self.candidates:
            return self._result(True, notes)
        try:
            for predicate in ("changed", "out_of_tolerance"):
                self.predicate = predicate  # type: ignore[assignment]
                self._bisect(notes)
        except OutOfTime:
            notes.append("time budget exhausted: the first divergent node is an upper bound")
            return self._result(False, notes)
        return self._result(True, notes)

    def _diverged_at(self, position: int) -> bool:
        cut = self._cut(self.candidates[position])
        return any(getattr(self.errors[n], self.predicate) for n in cut if n in self.errors)

    def _bisect(self, notes: list[str]) -> None:
        """K-ary search: each round measures the cuts at evenly spaced positions (as many as fit in
        ``chunk_size`` tensors), because one run costs a full inference whatever it exposes. When the
        remaining bracket, the nodes just before it and the growth samples fit in one chunk, a last
        round measures them all and the first divergent node is read off directly."""
        low, high, high_known = -1, len(self.candidates) - 1, False
        while True:
            span = list(range(low + 1, high + (0 if high_known else 1)))
            final = self._final_round(low, high, span) if high_known else None
            if final is not None:
                self.measure(final)
                break
            positions = self._spread(span, include_end=not high_known)
            # A cut already known to diverge (measured by an earlier round or predicate) ends the round.
            known = next((p for p in positions if self._diverged_at(p)), None)
            positions = [p for p in positions if known is None or p <= known]
            self.measure((name for p in positions for name in self._cut(self.candidates[p])), probing=True)
            for position in positions:
                if self._diverged_at(position):
                    high, high_known = position, True
                    break
                low = position
            if not high_known:
                return  # the last cut is clean: nothing diverged (under the persistence assumption)
        bisected = next((p for p in range(low + 1, high + 1) if self._diverged_at(p)), high)
        first = next((r for r in self.profile() if getattr(r, self.predicate)), None)
        if first is not None and first.index < self.candidates[bisected].index:
            notes.append(
                f"the search ({self.predicate.replace('_', ' ')}) narrowed to {self.candidates[bisected].name!r} but"
                f" the earlier node {first.name!r} already had (the difference did not persist downstream)"
            )

    def _final_round(self, low: int, high: int, span: list[int]) -> list[str] | None:
        """Every tensor that settles the answer, if they fit in one chunk: the bracket's node outputs and
        inputs, the ``CONFIRM_BEFORE`` nodes before it, and a growth sample after it."""
        window = self.candidates[max(0, low + 1 - CONFIRM_BEFORE) : high + 1]
        after = self.candidates[high + 1 :]
        samples: list[float] = (
            np.linspace(0, len(after) - 1, min(GROWTH_SAMPLES, len(after))).round().tolist() if after else []
        )
        names = [name for node in window for name in (*node.inputs, *node.outputs)]
        names += [name for i in sorted({int(i) for i in samples}) for name in after[i].outputs]
        todo = {n for n in names if n in self.matchable and n not in self.errors}
        return names if len(todo) <= self.chunk_size or len(span) <= 1 else None

    def _spread(self, span: list[int], *, include_end: bool) -> list[int]:
        """Evenly spaced positions of ``span`` whose cuts together fit in ``chunk_size`` tensors (at least one)."""
        count = min(len(span), self.chunk_size)
        while True:
            picks = sorted({span[int(i)] for i in np.linspace(0, len(span) - 1, count).round()})
            if include_end and span[-1] not in picks:
                picks.append(span[-1])
            tensors = {n for p in picks for n in self._cut(self.candidates[p]) if n not in self.errors}
            if len(tensors) <= self.chunk_size or count == 1:
                return picks
            count = max(1, count // 2)

    def _result(self, complete: bool, notes: list[str]) -> SearchResult:
        profile = self.profile()
        changed = [r for r in profile if r.changed]
        first_changed = next((r for r in changed if not r.inputs_changed), changed[0] if changed else None)
        first_out = next((r for r in profile if r.out_of_tolerance), None)
        skipped = {**self.skipped, **self.subject.skipped, **self.reference.skipped}
        return SearchResult(profile, first_changed, first_out, complete, skipped=skipped, notes=notes)


def _aliases(subject: frozenset[str], reference: frozenset[str], *, pair_dequantized: bool) -> dict[str, str]:
    """Subject tensor name -> reference tensor name: equal names, else the name without an ORT prefix;
    with ``pair_dequantized``, ``T_DequantizeLinear_Output`` -> ``T`` in place of ``T`` -> ``T``."""
    alias = {name: name for name in subject & reference}
    for name in subject - reference:
        for prefix in GENERATED_PREFIXES:
            original = name.removeprefix(prefix)
            if original != name and original in reference and original not in subject:
                alias[name] = original
        stem = name.removesuffix(DEQUANTIZED_SUFFIX)
        if pair_dequantized and stem != name and stem in reference:
            alias.pop(stem, None)
            alias[name] = stem
    return alias
