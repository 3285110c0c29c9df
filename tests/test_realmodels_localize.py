"""Localization over the real-model corpus (issue 13): does it name the node whose weight changed?

For every corpus model: a baseline with intermediates (``baseline capture --intermediates``), then
the largest float weight scaled by 1.001 (``variants.edit_largest_weight``) and ``localize`` against
the baseline. The ground truth is computed here with plain ``onnx``, never with onnxmon: the
tensors (initializers, ``Constant`` values) and attributes that differ between the two files, and
the top-level nodes that consume them (a node whose subgraph reads one counts). ``first_changed``
must name one of those consumers in at least 95% of the models where the edit changed anything;
a model whose outputs and intermediates the edit leaves bitwise unchanged (a tree threshold no
sample crosses) is right to name nothing and is listed apart. ``pytest -s`` prints the table.

For the fp16, int8 (dynamic and static QDQ) and one-ULP variants (where the converter makes a model
ONNX Runtime loads) localize must not crash, against the baseline and against the pristine model as
reference.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from monitor import capture
from monitor.localize import configured
from monitor.localize.report import LocalizationReport
from monitor.localize.request import LocalizeRequest
from tests import variants
from tests.realmodels import MODELS, Prepared, prepare

pytestmark = pytest.mark.realmodels

HIT_RATE = 0.95


@pytest.fixture(scope="module")
def prepared() -> Iterator[dict[str, Prepared]]:
    yield {}


def _with_intermediates(cache: dict[str, Prepared], name: str, tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    item = prepare(cache, name, tmp_path_factory)
    if not item.baseline:
        capture.capture_baseline(item.plan(), intermediate_samples=1)
        item.baseline = True
    return item


# --- ground truth, plain onnx ---------------------------------------------------------------------


def _reads(node: onnx.NodeProto, names: set[str]) -> bool:
    """The node, or any node of its subgraphs, takes one of ``names`` as an input."""
    if names & set(node.input):
        return True
    for attribute in node.attribute:
        subs = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)
        if any(_reads(inner, names) for sub in subs for inner in sub.node):
            return True
    return False


def changed_and_consumers(pristine: Path, variant: Path) -> tuple[set[str], set[str]]:
    """(changed tensor names, names of top-level nodes consuming them or holding a changed attribute)."""
    before, after = onnx.load(str(pristine)), onnx.load(str(variant))
    changed: set[str] = set()
    edited_nodes: set[int] = set()
    for old_graph, new_graph in zip(variants.all_graphs(before.graph), variants.all_graphs(after.graph), strict=True):
        old_inits = {t.name: numpy_helper.to_array(t) for t in old_graph.initializer}
        for tensor in new_graph.initializer:
            if not np.array_equal(numpy_helper.to_array(tensor), old_inits[tensor.name]):
                changed.add(tensor.name)
        for old_node, new_node in zip(old_graph.node, new_graph.node, strict=True):
            if old_node.op_type == "Constant":
                if old_node.SerializeToString() != new_node.SerializeToString():
                    changed.update(new_node.output)
            elif old_graph is before.graph and _own_attributes(old_node) != _own_attributes(new_node):
                edited_nodes.add(list(old_graph.node).index(old_node))
    consumers = set()
    for index, node in enumerate(after.graph.node):
        if index in edited_nodes or _reads(node, changed) or _inner_change(before.graph.node[index], node):
            consumers.add(node.name or f"{node.op_type}_{index}")
    return changed, consumers


def _own_attributes(node: onnx.NodeProto) -> list[bytes]:
    return [a.SerializeToString() for a in node.attribute if a.type not in (onnx.AttributeProto.GRAPH,)]


def _inner_change(old: onnx.NodeProto, new: onnx.NodeProto) -> bool:
    """A subgraph of the node differs (an edited Constant or initializer inside it)."""
    return old.SerializeToString() != new.SerializeToString() and any(
        a.type == onnx.AttributeProto.GRAPH or a.graphs for a in new.attribute
    )


def outputs_unchanged(pristine: Path, variant: Path, feeds: dict[str, np.ndarray]) -> bool:
    """Plain ORT: every final output bitwise equal on the localized sample."""
    runs = []
    for path in (pristine, variant):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        runs.append(session.run(None, feeds))
    return all(
        np.asarray(a).tobytes() == np.asarray(b).tobytes() if np.asarray(a).dtype != object else repr(a) == repr(b)
        for a, b in zip(*runs, strict=True)
    )


# --- the tests ------------------------------------------------------------------------------------


def _describe(node: object) -> str:
    if node is None:
        return "-"
    fused = f" fused from {list(node.fused_from)}" if node.fused_from else ""  # type: ignore[attr-defined]
    return f"{node.name} ({node.op_type}){fused}"  # type: ignore[attr-defined]


def test_first_changed_names_a_consumer_of_the_changed_weight(
    prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    rows: list[tuple[str, str, str, str, str, str]] = []
    hits, misses, crashes, unchanged = [], [], [], []
    for name in sorted(MODELS):
        item = _with_intermediates(prepared, name, tmp_path_factory)
        what = variants.edit_largest_weight(item.pristine, item.path, item.model.external_data, variants.scaled)
        _, consumers = changed_and_consumers(item.pristine, item.path)
        try:
            report = configured.localize_model(item.plan(), LocalizeRequest(against="baseline"))
        except Exception as exc:  # a crash is a finding, collected so every model is tried
            crashes.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
            rows.append((name, what, ", ".join(sorted(consumers)), "CRASH", "CRASH", ""))
            continue
        first = report.first_changed
        # On ORT's optimized graph a fused node stands for several model nodes: one of them must be a consumer.
        if first is not None and consumers & {first.name, *first.fused_from}:
            hits.append(name)
        elif first is None and outputs_unchanged(item.pristine, item.path, item.samples()[0]):
            unchanged.append(name)
        else:
            misses.append(f"{name}: named {_describe(first)}, consumers {sorted(consumers)}")
        rows.append(
            (
                name,
                what,
                ", ".join(sorted(consumers)),
                _describe(first),
                _describe(report.first_out_of_tolerance),
                f"{report.comparison}, level {report.graph_level}, {report.graph_view} graph",
            )
        )
    print("\nmodel | changed weight | consumers | first_changed | first_out_of_tolerance | comparison")
    for row in rows:
        print(" | ".join(row))
    judged = len(hits) + len(misses) + len(crashes)
    rate = len(hits) / judged if judged else 1.0
    print(f"hit rate {len(hits)}/{judged} = {rate:.1%}; unchanged by the edit (nothing to name): {unchanged}")
    assert not crashes, f"localize crashed on {crashes}"
    assert rate >= HIT_RATE, f"first_changed named a consumer in {len(hits)}/{judged}; misses: {misses}"


@pytest.mark.parametrize("variant", ["fp16", "int8-dynamic", "int8-qdq", "weight-1ulp"])
def test_localize_never_crashes_on_converted_models(
    variant: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    crashes, tried = [], []
    for name in sorted(MODELS):
        item = _with_intermediates(prepared, name, tmp_path_factory)
        try:
            if variant == "fp16":
                variants.fp16(item.pristine, item.path, keep_io_types=True)
            elif variant == "weight-1ulp":
                variants.edit_largest_weight(item.pristine, item.path, item.model.external_data, variants.one_ulp)
            else:
                variants.quantize(item.pristine, item.path, static=variant == "int8-qdq", samples=item.samples())
        except variants.NotApplicable:
            continue
        tried.append(name)
        for against, reference in (("baseline", None), ("model", item.pristine)):
            try:
                report = configured.localize_model(
                    item.plan(), LocalizeRequest(against=against, reference_model=reference)
                )  # type: ignore[arg-type]
                assert isinstance(report, LocalizationReport)
                print(f"{variant} {name} vs {against}: {report.summary()}")
            except Exception as exc:
                crashes.append(f"{name} vs {against}: {type(exc).__name__}: {exc}"[:300])
    assert tried, f"no model could be converted to {variant}"
    assert not crashes, f"localize crashed on {variant} variants: {crashes}"
