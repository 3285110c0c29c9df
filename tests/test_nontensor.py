"""Non-tensor outputs: strings, sequences and maps are captured, stored without pickle and compared.

Each kind goes through real ONNX Runtime sessions: capture a baseline, check it again (pass),
then change one thing (a string label, a map key, a sequence length, a value beyond tolerance)
and read the verdict and the reason. ``runtime/nontensor.py`` holds the naming scheme.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from monitor import capture
from monitor.check import run_check
from monitor.compare.outputs import compare_output
from monitor.config.plan import plan_for
from monitor.errors import ModelError
from monitor.files import baselines
from monitor.results import AppliedTolerance, CheckResult, Verdict
from monitor.runtime.nontensor import companions, flatten, flatten_maps, keys_name, shapes_name
from tests.workspace import Workspace

CORPUS = Path(__file__).resolve().parent / "corpus" / "sklearn"  # tests/corpus/make_sklearn.py
ZIPMAP = CORPUS / "logreg_zipmap.onnx"
STRINGS = CORPUS / "logreg_strings.onnx"
LABELS = ["cat", "dog", "émeu/ä b"]


def zipmap_workspace(tmp_path: Path, model: Path = ZIPMAP) -> Workspace:
    ws = Workspace(tmp_path)
    ws.add_model("clf", onnx.load(str(model)), dims={"input:0": 5})
    return ws


def graph_model(nodes: list[onnx.NodeProto], outputs: list[onnx.ValueInfoProto], **init: np.ndarray) -> onnx.ModelProto:
    """A float ``x (batch, 4)`` model; ``init`` become initializers."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])]
    initializers = [numpy_helper.from_array(value, name) for name, value in init.items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def captured(tmp_path: Path, model: onnx.ModelProto) -> Workspace:
    ws = Workspace(tmp_path)
    ws.add_model("m", model)
    capture.capture_baseline(plan_for(ws.settings(), "m"))
    result = run_check(plan_for(ws.settings(), "m"))
    assert result.verdict is Verdict.PASS, result.all_reasons()
    return ws


def rechecked(ws: Workspace, model: onnx.ModelProto) -> dict[str, tuple[Verdict, set[str]]]:
    ws.replace_model("m", model)
    result: CheckResult = run_check(plan_for(ws.settings(), "m"))
    return {o.name: (o.verdict, {r.code for r in o.reasons}) for o in result.outputs}


# --- ZipMap: seq(map(K, float)) -------------------------------------------------------------------


def test_a_zipmap_classifier_baselines_and_passes_its_reruns(tmp_path: Path) -> None:
    ws = zipmap_workspace(tmp_path)
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    baseline = baselines.active(ws.settings().store.baselines_dir, "clf")
    assert baseline is not None
    outputs = baseline.sample_outputs(0)
    assert outputs["output_probability"].shape == (5, 3) and outputs["output_probability"].dtype == np.float32
    np.testing.assert_array_equal(outputs[keys_name("output_probability")], [0, 1, 2])
    np.testing.assert_allclose(outputs["output_probability"].sum(axis=1), 1.0, rtol=1e-5)
    result = run_check(plan_for(ws.settings(), "clf"))
    assert result.verdict is Verdict.PASS, result.all_reasons()
    assert {o.name for o in result.outputs} == {"output_label", "output_probability", "output_probability:keys"}


def test_changed_zipmap_probabilities_fail_that_output(tmp_path: Path) -> None:
    ws = zipmap_workspace(tmp_path)
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    model = onnx.load(str(ZIPMAP))
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.name == "coefficients":
                attr.floats[:] = [v * 1.01 for v in attr.floats]
    ws.replace_model("clf", model)
    result = run_check(plan_for(ws.settings(), "clf"))
    verdicts = {o.name: o.verdict for o in result.outputs}
    assert verdicts["output_probability"] is Verdict.FAIL
    assert verdicts["output_probability:keys"] is Verdict.PASS


def test_a_string_labelled_classifier_stores_its_labels_as_text_and_passes(tmp_path: Path) -> None:
    ws = zipmap_workspace(tmp_path, STRINGS)
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    baseline = baselines.active(ws.settings().store.baselines_dir, "clf")
    assert baseline is not None
    outputs = baseline.sample_outputs(0)
    assert outputs["output_label"].dtype.kind == "U" and set(outputs["output_label"]) <= set(LABELS)
    assert outputs["output_probability:keys"].tolist() == LABELS
    assert run_check(plan_for(ws.settings(), "clf")).verdict is Verdict.PASS


def test_an_npz_with_the_companion_tensors_imports_as_a_baseline(tmp_path: Path) -> None:
    ws = zipmap_workspace(tmp_path, STRINGS)
    captured_baseline = capture.capture_baseline(plan_for(ws.settings(), "clf"))
    files = []
    for index in range(captured_baseline.meta.sample_count):
        path = tmp_path / f"reference-{index}.npz"
        np.savez(path, **captured_baseline.sample_outputs(index))  # output_label, output_probability(:keys)
        files.append(path)
    capture.import_baseline(plan_for(ws.settings(), "clf"), files, promote=True)
    assert run_check(plan_for(ws.settings(), "clf")).verdict is Verdict.PASS


def zipmap_model(labels: Sequence[str]) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Slice", ["x", "start", "end", "axis"], ["three"]),
        helper.make_node("Softmax", ["three"], ["soft"], axis=1),
        helper.make_node("ZipMap", ["soft"], ["p"], domain="ai.onnx.ml", classlabels_strings=list(labels)),
    ]
    value = helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    out = helper.make_value_info("p", helper.make_sequence_type_proto(value))
    ints = {"start": np.array([0], np.int64), "end": np.array([3], np.int64), "axis": np.array([1], np.int64)}
    return graph_model(nodes, [out], **ints)


def test_a_renamed_map_key_fails_the_keys_tensor_exactly(tmp_path: Path) -> None:
    ws = captured(tmp_path, zipmap_model(["a", "b", "c"]))
    verdicts = rechecked(ws, zipmap_model(["a", "b", "zé"]))
    assert verdicts["p:keys"] == (Verdict.FAIL, {"exact_mismatch"})
    assert verdicts["p"] == (Verdict.PASS, set())


# --- tensor(string) -------------------------------------------------------------------------------


def string_model(scale: float) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Mul", ["x", "scale"], ["scaled"]),
        helper.make_node("Cast", ["scaled"], ["text"], to=TensorProto.STRING),
    ]
    out = [helper.make_tensor_value_info("text", TensorProto.STRING, ["batch", 4])]
    return graph_model(nodes, out, scale=np.array(scale, np.float32))


def test_a_changed_string_output_is_an_exact_mismatch_not_a_changed_dtype(tmp_path: Path) -> None:
    ws = captured(tmp_path, string_model(1.0))
    baseline = baselines.active(ws.settings().store.baselines_dir, "m")
    assert baseline is not None and baseline.sample_outputs(0)["text"].dtype.kind == "U"
    verdicts = rechecked(ws, string_model(-12345.678))  # longer strings: a wider <U dtype than stored
    assert verdicts["text"] == (Verdict.FAIL, {"exact_mismatch"})


def test_unicode_of_any_width_compares_by_value() -> None:
    tolerance = AppliedTolerance(atol=0.0, rtol=0.0)
    narrow, wide = np.array(["a", ""], dtype="<U1"), np.array(["a", ""], dtype="<U9")
    assert compare_output("t", [wide], [narrow], tolerance).verdict is Verdict.PASS
    changed = compare_output("t", [np.array(["a", "é\x00x"])], [narrow], tolerance)
    assert changed.verdict is Verdict.FAIL and changed.metrics.mismatch_count == 1


# --- seq(tensor(T)) -------------------------------------------------------------------------------


def sequence_model(split: Sequence[int], scale: float = 1.0) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Mul", ["x", "scale"], ["scaled"]),
        helper.make_node("SplitToSequence", ["scaled", "split"], ["parts"], axis=1),
    ]
    out = [helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None)]
    return graph_model(nodes, out, scale=np.array(scale, np.float32), split=np.array(split, np.int64))


def test_a_sequence_of_tensors_round_trips_and_its_changes_have_verdicts(tmp_path: Path) -> None:
    ws = captured(tmp_path, sequence_model([1, 3]))
    baseline = baselines.active(ws.settings().store.baselines_dir, "m")
    assert baseline is not None
    stored = baseline.sample_outputs(0)
    assert stored[shapes_name("parts")].tolist() == [[2, 1], [2, 3]] and stored["parts"].shape == (8,)
    shorter = rechecked(ws, sequence_model([4]))  # one element instead of two
    assert shorter["parts:shapes"] == (Verdict.ERROR, {"shape_changed"})
    reshaped = rechecked(ws, sequence_model([2, 2]))  # same length and size, other element shapes
    assert reshaped["parts:shapes"] == (Verdict.FAIL, {"exact_mismatch"})
    moved = rechecked(ws, sequence_model([1, 3], scale=1.5))
    assert moved["parts"][0] is Verdict.FAIL and "atol_rtol" in moved["parts"][1]
    assert moved["parts:shapes"] == (Verdict.PASS, set())


def test_elements_of_one_shape_are_stacked() -> None:
    parts = [np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)]
    flat = flatten("s", "seq(tensor(float))", parts)
    assert flat["s"].shape == (2, 2, 3) and flat["s:shapes"].tolist() == [[2, 3], [2, 3]]
    empty = flatten("s", "seq(tensor(int64))", [])
    assert empty["s"].dtype == np.int64 and empty["s"].shape == (0,) and empty["s:shapes"].shape == (0, 0)
    ragged = flatten("s", "seq(tensor(string))", [np.array(["a"], object), np.array([["bc"]], object)])
    assert ragged["s"].tolist() == ["a", "bc"] and ragged["s:shapes"].tolist() == [[1, -1], [1, 1]]


# --- maps, and what is refused --------------------------------------------------------------------


def test_maps_flatten_in_sorted_key_order_with_string_keys_as_text() -> None:
    values, keys = flatten_maps("p", "seq(map(string,tensor(float)))", [{"b": 0.25, "a": 0.75}, {"a": 0.5, "b": 0.5}])
    np.testing.assert_array_equal(values, np.array([[0.75, 0.25], [0.5, 0.5]], np.float32))
    assert keys.dtype.kind == "U" and keys.tolist() == ["a", "b"]
    values, keys = flatten_maps("p", "seq(map(int64,tensor(double)))", [{0: 0.5, 1: 0.5}, {0: 0.25, 2: 0.75}])
    assert keys.tolist() == [0, 1, 2] and values.dtype == np.float64
    np.testing.assert_array_equal(values, [[0.5, 0.5, np.nan], [0.25, np.nan, 0.75]])
    with pytest.raises(ModelError, match=r"map 1 has \[0, 2\], map 0 has \[0, 1\]"):
        flatten_maps("p", "seq(map(int64,tensor(int64)))", [{0: 1, 1: 2}, {0: 1, 2: 3}])


def test_a_bare_map_becomes_values_and_keys() -> None:
    flat = flatten("m", "map(string,tensor(string))", {"z": "", "a": "é"})
    assert flat["m"].tolist() == ["é", ""] and flat["m:keys"].tolist() == ["a", "z"]
    flat = flatten("m", "map(int64,tensor(float))", {3: 1.5, -1: 2.0})
    assert flat["m"].dtype == np.float32 and flat["m:keys"].tolist() == [-1, 3]
    assert companions("m", "map(int64,tensor(float))") == ("m", "m:keys")
    assert companions("s", "seq(tensor(float))") == ("s", "s:shapes")
    assert companions("t", "tensor(string)") == ("t",)


def test_a_string_ending_in_nul_is_refused_rather_than_truncated() -> None:
    with pytest.raises(ModelError, match=r"'t': element 1 ends in NUL"):
        flatten("t", "tensor(string)", np.array(["a", "b\x00"], dtype=object))


def optional_model() -> onnx.ModelProto:
    node = helper.make_node("Optional", ["x"], ["maybe"])
    element = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    return graph_model([node], [helper.make_value_info("maybe", helper.make_optional_type_proto(element))])


def test_an_unsupported_output_type_is_an_error_verdict_naming_the_output(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("m", optional_model())
    with pytest.raises(ModelError, match=r"'maybe' has type optional\(tensor\(float\)\)"):
        capture.capture_baseline(plan_for(ws.settings(), "m"))
    ws.replace_model("m", string_model(1.0))
    capture.capture_baseline(plan_for(ws.settings(), "m"))
    ws.replace_model("m", optional_model())
    result = run_check(plan_for(ws.settings(), "m"))
    assert result.verdict is Verdict.ERROR
    reason, *rest = result.reasons
    assert reason.code == "model_error" and "optional(tensor(float))" in reason.detail
    assert [r.code for r in rest] == ["model_changed"]  # the file is not the baseline's


def test_a_companion_name_taken_by_another_output_is_a_model_error(tmp_path: Path) -> None:
    model = sequence_model([1, 3])
    model.graph.node.append(helper.make_node("Identity", ["x"], ["parts:shapes"]))
    model.graph.output.append(helper.make_tensor_value_info("parts:shapes", TensorProto.FLOAT, None))
    ws = Workspace(tmp_path)
    ws.add_model("m", model)
    with pytest.raises(ModelError, match=r"needs the name 'parts:shapes', which another output already has"):
        capture.capture_baseline(plan_for(ws.settings(), "m"))


def test_a_string_input_is_refused_naming_it(tmp_path: Path) -> None:
    inputs = [helper.make_tensor_value_info("words", TensorProto.STRING, ["batch"])]
    outputs = [helper.make_tensor_value_info("same", TensorProto.STRING, ["batch"])]
    graph = helper.make_graph([helper.make_node("Identity", ["words"], ["same"])], "g", inputs, outputs)
    ws = Workspace(tmp_path)
    ws.add_model("m", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8))
    with pytest.raises(ModelError, match=r"input 'words' is a tensor\(string\)"):
        capture.capture_baseline(plan_for(ws.settings(), "m"))


# --- companions as outputs everywhere: metrics and pages ------------------------------------------


def test_companions_and_class_named_outputs_reach_metrics_and_pages(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from monitor.api.app import create_app
    from tests.test_metrics import RealDaemon, migrated_store, scrape, series

    ws = Workspace(tmp_path)
    ws.add_model("strings", onnx.load(str(STRINGS)), dims={"input:0": 5})
    ws.add_model("columns", onnx.load(str(CORPUS / "tree_columns.onnx")), dims={"input:0": 5})
    for name in ("strings", "columns"):
        capture.capture_baseline(plan_for(ws.settings(), name))
    for store in migrated_store(tmp_path):
        daemon = RealDaemon(ws.settings(), store)
        for name in ("strings", "columns"):
            assert daemon.run_now(name).verdict is Verdict.PASS
        outputs = {labels["output"] for labels in series(scrape(daemon.registry), "onnxmon_output_checks_total")}
        assert {"output_probability:keys", "output_label", "sémeu/ä b"} <= outputs
        client = TestClient(create_app(daemon), raise_server_exceptions=False)
        page = client.get("/models/strings")
        assert page.status_code == 200 and "output_probability:keys" in page.text
        assert "sémeu/ä b" in client.get("/models/columns").text


def test_text_round_trips_through_npy_exactly_and_only_where_asked(tmp_path: Path) -> None:
    from monitor.errors import BaselineError, BenchsetError
    from monitor.files import tensors

    words = np.array([["", "é\x00x"], ["日本", "a b/c"]])
    path = tmp_path / "t.npy"
    tensors.save_npy(path, words, error=BaselineError, text=True)
    back = tensors.load_npy(path, error=BaselineError, text=True)
    assert back.dtype == words.dtype and back.tolist() == words.tolist()
    with pytest.raises(BenchsetError, match=r"dtype <U5; only plain numeric/bool arrays"):
        tensors.load_npy(path)  # benchsets do not take strings
    forged = bytearray(path.read_bytes())
    forged[-4:] = (0x110000).to_bytes(4, "little")  # beyond the last code point
    path.write_bytes(bytes(forged))
    with pytest.raises(BaselineError, match="beyond U"):
        tensors.load_npy(path, error=BaselineError, text=True)
