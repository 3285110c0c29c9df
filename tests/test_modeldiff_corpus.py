"""The static model diff on every model of the real-model corpus, checked against plain onnx.

Each variant is made with the tools people use (``tests/variants.py``): the largest float weight
scaled by 1.001 or moved one ULP, an fp16 conversion, an int8 dynamic or static (QDQ) quantization. What the diff
must name (the changed tensor or attribute, the nodes that read it, the count of converted
initializers) is computed here independently, by scanning the two protobufs with plain ``onnx``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from monitor import jsonsafe, modeldiff
from monitor.files import benchsets
from tests import variants
from tests.realmodels import MODELS, Prepared, not_applicable, prepare, source_file

pytestmark = pytest.mark.realmodels
NAMES = sorted(MODELS)


def named_values(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Initializers and Constant values by the name their readers use, over every graph."""
    found: dict[str, onnx.TensorProto] = {}
    for graph in variants.all_graphs(model.graph):
        found |= {t.name: t for t in graph.initializer}
        found |= {
            n.output[0]: a.t for n in graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"
        }
    return found


def float_lists(model: onnx.ModelProto) -> dict[tuple[str, str], list[float]]:
    return {
        (node.name, a.name): list(a.floats)
        for graph in variants.all_graphs(model.graph)
        for node in graph.node
        for a in node.attribute
        if a.type == onnx.AttributeProto.FLOATS
    }


def readers(model: onnx.ModelProto, name: str) -> set[str]:
    return {node.name for graph in variants.all_graphs(model.graph) for node in graph.node if name in node.input}


def edited(name: str, tmp_path: Path, edit: variants.Edit) -> tuple[Path, Path, onnx.ModelProto, onnx.ModelProto]:
    model = MODELS[name]
    pristine = source_file(model)
    target = tmp_path / pristine.name
    variants.edit_largest_weight(pristine, target, model.external_data, edit)
    return pristine, target, onnx.load(str(pristine)), onnx.load(str(target))


def what_changed(old: onnx.ModelProto, new: onnx.ModelProto) -> tuple[set[str], set[tuple[str, str]]]:
    """(changed tensor names, changed (node, attribute) float lists), by plain comparison."""
    before, after = named_values(old), named_values(new)
    tensors = {
        n for n in before if numpy_helper.to_array(before[n]).tobytes() != numpy_helper.to_array(after[n]).tobytes()
    }
    lists_before, lists_after = float_lists(old), float_lists(new)
    lists = {key for key in lists_before if lists_before[key] != lists_after[key]}
    return tensors, lists


@pytest.mark.parametrize("name", NAMES)
def test_a_weight_scaled_by_1_001_is_named_with_the_nodes_that_read_it(name: str, tmp_path: Path) -> None:
    pristine, target, old, new = edited(name, tmp_path, variants.scaled)
    tensors, lists = what_changed(old, new)
    diff = modeldiff.diff_models(pristine, target)
    against_manifest = modeldiff.diff_against_manifest(modeldiff.manifest(pristine), modeldiff.load_model(target))
    for found in (diff, against_manifest):
        assert found and not found.nodes_added and not found.nodes_removed and not found.nodes_changed
        assert {c.key.name for c in found.changed_tensors} == tensors
        assert {(c.node.key, c.attribute) for c in found.changed_attributes} == lists
        assert len(tensors) + len(lists) == 1
        for change in found.changed_tensors:
            assert {c.node.key for c in change.consumers} == readers(new, change.key.name)
            assert change.consumers, "a changed weight is read by some node"
    for change in diff.changed_tensors:
        assert change.changed_elements and change.max_rel_change is not None
        assert 0.5e-3 < change.max_rel_change < 3e-3  # 1e-3, give or take an fp16 rounding
    for change in against_manifest.changed_tensors:
        assert change.max_abs_change is None and change.old_stats and change.new_stats
        assert change.new_stats["max"] != change.old_stats["max"] or change.new_stats["min"] != change.old_stats["min"]
    assert not against_manifest.exact and diff.exact


@pytest.mark.parametrize("name", NAMES)
def test_a_weight_moved_one_ulp_is_named_and_its_change_is_that_ulp(name: str, tmp_path: Path) -> None:
    pristine, target, old, new = edited(name, tmp_path, variants.one_ulp)
    tensors, lists = what_changed(old, new)
    diff = modeldiff.diff_models(pristine, target)
    if tensors:
        (tensor_name,) = tensors
        values = numpy_helper.to_array(named_values(old)[tensor_name]).reshape(-1)
        (change,) = diff.changed_tensors
        assert change.key.name == tensor_name
    else:
        ((node, attribute),) = lists
        values = np.asarray(float_lists(old)[(node, attribute)], dtype=np.float32)
        (change,) = diff.changed_attributes  # type: ignore[assignment]
    largest = values[int(np.argmax(np.abs(values)))]
    step = float(
        np.abs(
            np.nextafter(largest, np.copysign(np.inf, largest), dtype=values.dtype).astype(np.float64) - float(largest)
        )
    )
    assert change.changed_elements == 1
    assert change.max_abs_change == step


@pytest.mark.parametrize("name", NAMES)
def test_a_model_is_identical_to_itself_and_to_itself_resaved(name: str, tmp_path: Path) -> None:
    model = MODELS[name]
    pristine = source_file(model)
    same = modeldiff.diff_models(pristine, pristine)
    assert not same and same.to_dict()["identical"] and same.summary == ()
    resaved = tmp_path / pristine.name
    variants.save(onnx.load(str(pristine)), resaved, model.external_data)
    assert not modeldiff.diff_models(pristine, resaved)
    assert not modeldiff.diff_against_manifest(modeldiff.manifest(pristine), modeldiff.load_model(resaved))


def initializer_types(model: onnx.ModelProto) -> dict[str, int]:
    return {t.name: t.data_type for graph in variants.all_graphs(model.graph) for t in graph.initializer}


@pytest.mark.parametrize("name", NAMES)
def test_an_fp16_conversion_is_summarized_as_initializers_float32_to_float16(name: str, tmp_path: Path) -> None:
    pristine, target = source_file(MODELS[name]), tmp_path / "fp16.onnx"
    try:
        variants.fp16(pristine, target, keep_io_types=False)
    except variants.NotApplicable as exc:  # the converter's limit, listed with its reason: not a skip
        assert not_applicable("fp16").get(name), f"fp16 of {name}: {exc}; list it in tests/corpus/scenarios.yaml"
        return
    assert not not_applicable("fp16").get(name), f"fp16 of {name} now converts; update tests/corpus/scenarios.yaml"
    before, after = initializer_types(onnx.load(str(pristine))), initializer_types(onnx.load(str(target)))
    converted = sum(
        1 for n, t in before.items() if t == onnx.TensorProto.FLOAT and after.get(n) == onnx.TensorProto.FLOAT16
    )
    diff = modeldiff.diff_models(pristine, target)
    assert diff
    lines = [line for line in diff.summary if line.endswith("float32→float16") and "initializer" in line]
    if converted:
        assert lines == [f"{converted} initializer{'s' * (converted != 1)} float32→float16"]
    else:
        assert lines == []


QDQ = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger")


@pytest.mark.parametrize("name", NAMES)
def test_an_int8_dynamic_quantization_names_the_quantize_nodes_it_added(name: str, tmp_path: Path) -> None:
    pristine, target = source_file(MODELS[name]), tmp_path / "int8.onnx"
    try:
        variants.quantize(pristine, target, static=False, samples=[])
    except variants.NotApplicable as exc:  # the quantizer's limit, listed with its reason: not a skip
        excused = not_applicable("int8-dynamic").get(name)
        assert excused, f"int8-dynamic of {name}: {exc}; list it in tests/corpus/scenarios.yaml"
        return
    count = lambda m: Counter(n.op_type for g in variants.all_graphs(m.graph) for n in g.node if n.op_type in QDQ)  # noqa: E731
    grew = count(onnx.load(str(target))) - count(onnx.load(str(pristine)))
    diff = modeldiff.diff_models(pristine, target)
    line = next((s for s in diff.summary if s.startswith("quantize/dequantize nodes added")), None)
    if not grew:  # nothing to quantize: already int8 (tashkeel-bilstm), Convs inside If branches (silero-vad)
        assert line is None, diff.summary
        return
    assert diff and line is not None, diff.summary
    for op in grew:
        assert f"{op}×" in line
    added = json.loads(jsonsafe.dumps(diff.to_dict()))["nodes_added"]
    assert sum(1 for node in added if node["op_type"] in QDQ) == min(sum(grew.values()), 200)


@pytest.fixture(scope="module")
def prepared() -> Iterator[dict[str, Prepared]]:
    yield {}


@pytest.mark.parametrize("name", NAMES)
def test_an_int8_static_qdq_quantization_is_summarized_as_pairs_around_the_nodes_they_feed(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    item = prepare(prepared, name, tmp_path_factory)
    plan = item.plan()
    benchsets.ensure(plan.benchset, plan.benchsets_dir)  # calibration data, drawn from the model's signature
    target = tmp_path / "qdq.onnx"
    try:
        variants.quantize(item.pristine, target, static=True, samples=item.samples())
    except variants.NotApplicable as exc:  # the quantizer's limit, listed with its reason: not a skip
        assert not_applicable("int8-qdq").get(name), (
            f"int8-qdq of {name}: {exc}; list it in tests/corpus/scenarios.yaml"
        )
        return
    old, new = onnx.load(str(item.pristine)), onnx.load(str(target))
    nodes = lambda m: [n for g in variants.all_graphs(m.graph) for n in g.node]  # noqa: E731
    grew = Counter(n.op_type for n in nodes(new) if n.op_type in QDQ) - Counter(
        n.op_type for n in nodes(old) if n.op_type in QDQ
    )
    old_dq = {o for n in nodes(old) if n.op_type == "DequantizeLinear" for o in n.output}
    new_dq = {o for n in nodes(new) if n.op_type == "DequantizeLinear" for o in n.output} - old_dq
    around = [n for n in nodes(new) if n.op_type not in QDQ[:3] and new_dq & set(n.input)]
    diff = modeldiff.diff_models(item.pristine, target)
    line = next((s for s in diff.summary if s.startswith("quantize/dequantize nodes added")), None)
    if not grew:
        assert line is None, diff.summary
        return
    assert diff and line is not None, diff.summary
    for op, count in grew.items():
        assert f"{op}×{count}" in line, (line, grew)
    if around:
        assert line.endswith(f" around {len(around)} node{'s' * (len(around) != 1)}"), (line, len(around))
