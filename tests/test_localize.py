"""Localization names the first ONNX node that moved, on real ONNX Runtime sessions of 100+ node models."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.errors import MonitorError
from monitor.localize.engine import (
    LEVEL_KEY,
    LocalizationReport,
    capture_intermediates,
    localize,
    per_layer_sqnr,
    plot_svg,
    tensor_error,
)
from monitor.localize.graph import ExposingRunner, load_model, save_optimized_model
from monitor.localize.report import NodeDivergence
from monitor.localize.request import LocalizeRequest
from monitor.localize.rule import Rule
from tests import modelzoo

CPU = [ProviderSpec(name="CPUExecutionProvider")]
PRODUCTION = SessionConfig()  # graph_optimization_level "all", as most deployments run


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("localize")
    mlp = modelzoo.deep_mlp()
    assert len(mlp.graph.node) >= 100
    paths = {
        "mlp": modelzoo.save(mlp, root / "mlp.onnx"),
        # Doubling one weight of w20 clearly moves matmul_20's output and the change persists downstream.
        "perturbed": modelzoo.save(modelzoo.perturb_initializer(mlp, "w20", 1.0, index=17), root / "perturbed.onnx"),
        "fused": modelzoo.save(modelzoo.fused_mlp(), root / "fused.onnx"),
        "fused_perturbed": modelzoo.save(
            modelzoo.perturb_initializer(modelzoo.fused_mlp(), "w2", 1.0, index=300), root / "fused_perturbed.onnx"
        ),
    }
    yield paths


@pytest.fixture(scope="module")
def mlp_feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).normal(0, 1, (4, 16)).astype(np.float32)}


@pytest.fixture(scope="module")
def fused_feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).normal(0, 1, (8, 257)).astype(np.float32)}


@pytest.mark.parametrize("mode", ["all", "bisect"])
def test_perturbed_weight_is_localized_to_its_consuming_node(
    models: dict[str, Path], mlp_feeds: dict[str, np.ndarray], mode: str
) -> None:
    report = localize(
        models["perturbed"],
        mlp_feeds,
        LocalizeRequest(reference_model=models["mlp"], mode=mode, graph_view="model"),
        providers=CPU,
        session=PRODUCTION,
    )
    for first in (report.first_changed, report.first_out_of_tolerance):
        assert first is not None
        assert (first.name, first.op_type) == ("matmul_20", "MatMul")
        assert first.inputs_changed is False  # the node itself changed, not something upstream
    assert report.mode == mode and report.complete and not report
    assert report.against == "model" and report.comparison == "noise_floor"
    downstream = [n for n in report.profile if n.index > report.first.index]
    assert downstream and all(n.changed and n.inputs_changed for n in downstream)


def test_bisect_uses_fewer_runs_than_nodes(models: dict[str, Path], mlp_feeds: dict[str, np.ndarray]) -> None:
    report = localize(
        models["perturbed"],
        mlp_feeds,
        LocalizeRequest(reference_model=models["mlp"], mode="bisect"),
        providers=CPU,
        session=PRODUCTION,
    )
    assert report.runs < 30 < report.nodes_total


@pytest.mark.parametrize("mode", ["all", "bisect"])
def test_unchanged_model_has_no_divergent_node(
    models: dict[str, Path], mlp_feeds: dict[str, np.ndarray], mode: str
) -> None:
    report = localize(models["mlp"], mlp_feeds, LocalizeRequest(mode=mode), providers=CPU, session=PRODUCTION)  # type: ignore[arg-type]
    assert report and report.first_out_of_tolerance is None
    assert all(not n.out_of_tolerance for n in report.profile)
    assert report.against == "unoptimized" and report.nondeterministic_reference == ()


def test_fp16_conversion_is_localized_and_the_error_persists(
    models: dict[str, Path], mlp_feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    from onnxconverter_common import float16

    fp16 = float16.convert_float_to_float16(onnx.load(str(models["mlp"])), keep_io_types=True)
    path = modelzoo.save(fp16, tmp_path / "fp16.onnx")
    # fp16 rounding is ~5e-4 of a tensor's spread here: below the 1% default, above 0.1%.
    report = localize(
        path,
        mlp_feeds,
        LocalizeRequest(reference_model=models["mlp"], threshold_rule="std", rel_threshold=1e-3),
        providers=CPU,
        session=PRODUCTION,
    )
    assert report.first_changed is not None and not report.first_changed.inputs_changed
    assert report.first is not None and report.first.index >= report.first_changed.index
    diverged = [n for n in report.profile if n.diverged]
    after_first = [n for n in report.profile if n.index >= report.first.index]
    assert report.first.index <= float(np.median([n.index for n in diverged]))
    assert len(diverged) >= 0.8 * len(after_first)  # once moved, the error stays above the threshold
    assert all(n.rel_error > 0 for n in after_first)


def test_exposing_a_fused_tensor_drops_the_graph_level_and_says_so(
    models: dict[str, Path], fused_feeds: dict[str, np.ndarray]
) -> None:
    report = localize(
        models["fused"], fused_feeds, LocalizeRequest(graph_view="model"), providers=CPU, session=PRODUCTION
    )
    assert report.graph_level != "all" and report.graph_view == "model"
    assert "changed the final outputs" in report.graph_level_detail
    model_nodes = {n.name for n in onnx.load(str(models["fused"])).graph.node}
    assert {n.name for n in report.profile} <= model_nodes  # no node of ORT's optimized graph leaks


def test_by_default_the_optimized_graph_is_exposed_at_the_production_level_mapped_back_and_says_so(
    models: dict[str, Path], fused_feeds: dict[str, np.ndarray]
) -> None:
    report = localize(models["fused"], fused_feeds, providers=CPU, session=PRODUCTION)
    assert report.graph_level == "all" and report.graph_view == "optimized"
    assert "left the final outputs bitwise equal" in report.graph_level_detail
    assert "mapped back to the model's nodes" in report.graph_level_detail
    model_nodes = {n.name for n in onnx.load(str(models["fused"])).graph.node}
    for node in report.profile:  # names, and what fused nodes replaced, are the model's own
        assert {node.name, *node.fused_from} <= model_nodes
    assert any(n.fused_from and n.optimized_node not in model_nodes for n in report.profile)


def test_fusion_faithful_graph_gives_production_outputs_bitwise(
    models: dict[str, Path], fused_feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    from monitor.runtime.session import Session

    production = Session(models["fused"], CPU, PRODUCTION).run(fused_feeds)
    optimized = load_model(save_optimized_model(models["fused"], CPU, PRODUCTION, tmp_path))
    unoptimized = PRODUCTION.model_copy(update={"graph_optimization_level": "disable"})
    with ExposingRunner(optimized, fused_feeds, providers=CPU, session=unoptimized, production=production) as runner:
        exposed = runner.fetch(["relu0", "relu1", "relu2"])
        assert set(exposed) == {"relu0", "relu1", "relu2"}
        assert runner.observer_mismatch is None
    with ExposingRunner(
        load_model(models["fused"]), fused_feeds, providers=CPU, session=PRODUCTION, production=production
    ) as naive:
        naive.fetch(["mm1"])
        assert naive.observer_mismatch is not None


def test_perturbed_weight_inside_a_fusion_names_the_fused_node(
    models: dict[str, Path], fused_feeds: dict[str, np.ndarray]
) -> None:
    report = localize(
        models["fused_perturbed"],
        fused_feeds,
        LocalizeRequest(reference_model=models["fused"], graph_view="model"),
        providers=CPU,
        session=PRODUCTION,
    )
    assert report.graph_level != "all" and report.first_changed is not None
    assert report.first_changed.name == "matmul_2" and not report.first_changed.inputs_changed


def test_perturbed_weight_inside_a_fusion_on_the_optimized_graph_names_the_fusion_it_is_in(
    models: dict[str, Path], fused_feeds: dict[str, np.ndarray]
) -> None:
    report = localize(
        models["fused_perturbed"],
        fused_feeds,
        LocalizeRequest(reference_model=models["fused"]),
        providers=CPU,
        session=PRODUCTION,
    )
    out, changed = report.first_out_of_tolerance, report.first_changed
    assert report.graph_level == "all" and report.graph_view == "optimized" and out is not None
    assert "matmul_2" in out.fused_from and out.name in out.fused_from
    assert out.optimized_node and out.optimized_node != out.name
    # Against the unoptimized reference the first fused kernel already rounds differently: a changed
    # kernel is what first_changed names, with the model nodes the fusion replaced.
    assert changed is not None and changed.fused_from and not changed.inputs_changed
    assert changed.index <= out.index


def test_chunk_size_does_not_change_the_answer(models: dict[str, Path], mlp_feeds: dict[str, np.ndarray]) -> None:
    small, large = (
        localize(
            models["perturbed"],
            mlp_feeds,
            LocalizeRequest(reference_model=models["mlp"], mode="all", chunk_size=size),
            providers=CPU,
            session=PRODUCTION,
        )
        for size in (8, 1000)
    )
    assert small.first == large.first and small.profile == large.profile
    assert small.runs > large.runs


def test_an_fp16_build_against_fp32_intermediates_is_measured_in_float64_not_infinitely_different(
    models: dict[str, Path], mlp_feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    """The check compares an fp16 output with an fp32 baseline in float64; localization must too, or
    every intermediate reads "dtype changed", infinitely different, and the ranking means nothing."""
    from onnxconverter_common import float16

    baseline = capture_intermediates(models["mlp"], mlp_feeds, providers=CPU, session=PRODUCTION, graph_view="model")
    fp16 = float16.convert_float_to_float16(onnx.load(str(models["mlp"])), keep_io_types=True)
    path = modelzoo.save(fp16, tmp_path / "fp16.onnx")
    report = localize(
        path,
        mlp_feeds,
        LocalizeRequest(against="baseline"),
        providers=CPU,
        session=PRODUCTION,
        reference_intermediates=baseline,
    )
    compared = [n for n in report.profile if n.op_type in ("MatMul", "Relu", "Add")]
    assert len(compared) > 50
    assert all(math.isfinite(n.max_abs_error) and n.max_abs_error < 0.05 for n in compared)
    assert report.first_changed is not None and report.first_changed.max_abs_error > 0
    assert math.isfinite(report.top[0].rel_error)


def test_baseline_intermediates_localize_the_perturbed_node(
    models: dict[str, Path], mlp_feeds: dict[str, np.ndarray]
) -> None:
    baseline = capture_intermediates(
        models["mlp"], mlp_feeds, providers=CPU, session=PRODUCTION, chunk_size=32, graph_view="model"
    )
    assert {"mm20", "act39", "y"} <= set(baseline)
    for mode in ("all", "bisect"):
        report = localize(
            models["perturbed"],
            mlp_feeds,
            LocalizeRequest(against="baseline", mode=mode),
            providers=CPU,
            session=PRODUCTION,
            reference_intermediates=baseline,
        )
        assert report.against == "baseline" and report.comparison == "bitwise"
        for first in (report.first_changed, report.first_out_of_tolerance):
            assert first is not None and first.name == "matmul_20" and not first.inputs_changed


def test_on_the_optimized_graph_the_perturbed_weight_is_named_on_its_fused_gemm(
    models: dict[str, Path], mlp_feeds: dict[str, np.ndarray]
) -> None:
    baseline = capture_intermediates(models["mlp"], mlp_feeds, providers=CPU, session=PRODUCTION, chunk_size=32)
    assert str(baseline[LEVEL_KEY]) == "all:optimized" and "mm20" not in baseline  # MatMul+Add+Tanh: one FusedGemm
    for mode in ("all", "bisect"):
        report = localize(
            models["perturbed"],
            mlp_feeds,
            LocalizeRequest(against="baseline", mode=mode),
            providers=CPU,
            session=PRODUCTION,
            reference_intermediates=baseline,
        )
        assert report.graph_view == "optimized" and report.comparison == "bitwise"
        for first in (report.first_changed, report.first_out_of_tolerance):
            assert first is not None and not first.inputs_changed
            assert (first.name, first.fused_from) == ("tanh_20", ("matmul_20", "add_20", "tanh_20"))
            assert first.optimized_node and first.optimized_node not in first.fused_from
            assert first.fused_op_types == ("MatMul", "Add", "Tanh")  # what a knowledge rule matches on
        from monitor.knowledge.incidents import localized_op_types

        assert "MatMul" in localized_op_types(report.to_dict())  # the MatMul inside the fused Tanh


def test_time_budget_cuts_the_search_short(models: dict[str, Path], mlp_feeds: dict[str, np.ndarray]) -> None:
    report = localize(
        models["perturbed"],
        mlp_feeds,
        LocalizeRequest(reference_model=models["mlp"], mode="all", time_budget_s=0.0),
        providers=CPU,
        session=PRODUCTION,
    )
    assert report.complete is False and report.profile == ()


def test_qdq_model_reports_per_layer_sqnr(tmp_path: Path) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class TinyReader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            rng = np.random.default_rng(3)
            self._batches = iter([{"x": rng.normal(0, 1, (4, 16)).astype(np.float32)} for _ in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._batches, None)

    float_path = modelzoo.save(modelzoo.deep_mlp(layers=8), tmp_path / "float.onnx")
    qdq_path = tmp_path / "qdq.onnx"
    quantize_static(str(float_path), str(qdq_path), TinyReader(), quant_format=QuantFormat.QDQ)
    feeds = {"x": np.random.default_rng(4).normal(0, 1, (4, 16)).astype(np.float32)}

    layers = per_layer_sqnr(float_path, qdq_path, feeds)
    by_tensor = {layer.tensor: layer for layer in layers}
    assert by_tensor["mm0"].quantized_tensor == "mm0_DequantizeLinear_Output"
    assert len(layers) >= 24 and [layer.index for layer in layers] == sorted(layer.index for layer in layers)
    assert all(10.0 < layer.sqnr_db < 80.0 for layer in layers)  # int8: tens of dB, never exact
    assert json.dumps([layer.to_dict() for layer in layers], allow_nan=False)
    assert all(math.isinf(layer.sqnr_db) for layer in per_layer_sqnr(float_path, float_path, feeds))


def test_report_round_trips_through_strict_json(models: dict[str, Path], mlp_feeds: dict[str, np.ndarray]) -> None:
    report = localize(
        models["perturbed"],
        mlp_feeds,
        LocalizeRequest(reference_model=models["mlp"]),
        providers=CPU,
        session=PRODUCTION,
    )
    text = json.dumps(report.to_dict(), allow_nan=False)
    assert LocalizationReport.from_dict(json.loads(text)) == report
    assert len(report.top) == 10 and report.top[0].rel_error == max(n.rel_error for n in report.profile)


def test_plot_is_svg_with_the_first_divergence_marked(
    models: dict[str, Path], mlp_feeds: dict[str, np.ndarray]
) -> None:
    report = localize(
        models["perturbed"],
        mlp_feeds,
        LocalizeRequest(reference_model=models["mlp"], graph_view="model"),
        providers=CPU,
        session=PRODUCTION,
    )
    svg = plot_svg(report)
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    assert "first changed: matmul_20 (MatMul)" in svg
    assert "first out of tolerance: matmul_20 (MatMul)" in svg
    assert len(root.findall("{http://www.w3.org/2000/svg}circle")) == len(report.profile)


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("actual", "reference", "diverged", "max_abs"),
    [
        ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], False, 0.0),
        ([1.0, 2.0, 3.1], [1.0, 2.0, 3.0], True, 0.1),  # 0.1 > 1% of std 0.816
        ([1.0, 2.0, 3.005], [1.0, 2.0, 3.0], False, 0.005),  # 0.005 < 0.00816
        ([NAN, 2.0, 3.0], [NAN, 2.0, 3.0], False, 0.0),  # NaN at the same place is agreement
        ([NAN, 2.0, 3.0], [1.0, 2.0, 3.0], True, INF),  # NaN on one side only is not
        ([INF, 2.0, 3.0], [INF, 2.0, 3.0], False, 0.0),
        ([-INF, 2.0, 3.0], [INF, 2.0, 3.0], True, INF),
        ([5.0, 5.0, 5.0 + 5e-7], [5.0, 5.0, 5.0], False, 5e-7),  # constant reference: the absolute floor 1e-6
        ([5.0, 5.0, 5.0 + 2e-6], [5.0, 5.0, 5.0], True, 2e-6),
    ],
)
def test_divergence_rule(actual: list[float], reference: list[float], diverged: bool, max_abs: float) -> None:
    error = tensor_error(np.array(actual), np.array(reference), rel_threshold=0.01, abs_floor=1e-6)
    assert error is not None and error.diverged is diverged
    assert error.max_abs_error == pytest.approx(max_abs, rel=1e-6)


def test_different_shapes_are_not_comparable() -> None:
    assert tensor_error(np.zeros((2, 3)), np.zeros((3, 2)), rel_threshold=0.01, abs_floor=1e-6) is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"chunk_size": 0}, "chunk_size must be >= 1"),
        ({"rel_threshold": 0.0}, "rel_threshold must be > 0"),
        ({"mode": "linear"}, "mode must be"),
    ],
)
def test_bad_options_are_user_errors_when_the_request_is_built(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(MonitorError, match=message):
        LocalizeRequest(**arguments)  # type: ignore[arg-type]


def test_against_the_baseline_without_its_intermediates_is_a_user_error(
    models: dict[str, Path], mlp_feeds: dict[str, np.ndarray]
) -> None:
    with pytest.raises(MonitorError, match="needs the baseline's intermediates"):
        localize(models["mlp"], mlp_feeds, LocalizeRequest(against="baseline"), providers=CPU, session=PRODUCTION)


def test_perturbed_conv_in_a_cnn_is_localized(tmp_path: Path) -> None:
    cnn = modelzoo.small_cnn()
    reference = modelzoo.save(cnn, tmp_path / "cnn.onnx")
    subject = modelzoo.save(modelzoo.perturb_initializer(cnn, "cw2", 3.0, index=40), tmp_path / "cnn_perturbed.onnx")
    feeds = {"x": np.random.default_rng(5).normal(0, 1, (1, 3, 16, 16)).astype(np.float32)}
    report = localize(subject, feeds, LocalizeRequest(reference_model=reference), providers=CPU, session=PRODUCTION)
    # Against the unoptimized reference every optimized kernel may change bits (first_changed can be
    # an earlier Conv); the check's tolerance names the perturbed one.
    assert report.first_out_of_tolerance is not None
    assert set(report.first_out_of_tolerance.outputs) & {"conv2", "crelu2"}
    same_level = localize(
        subject, feeds, LocalizeRequest(reference_model=reference), providers=CPU,
        session=SessionConfig(graph_optimization_level="disable"),
    )  # fmt: skip
    assert same_level.first_changed is not None and not same_level.first_changed.inputs_changed
    assert set(same_level.first_changed.outputs) & {"conv2", "crelu2"}


# --- the two rules on one tensor (monitor/localize/rule.py) -------------------------------------

TOLERANCE_RULE = Rule()  # the check's default atol 1e-5, rtol 1e-4


@pytest.mark.parametrize(
    ("actual", "reference", "changed", "out_of_tolerance"),
    [
        (np.float32(1.0), np.float32(1.0), False, False),  # 0-d tensors are tensors
        (np.array(1.0, np.float32), np.array(1.0 + 1e-6, np.float32), True, False),  # bitwise moved, inside atol
        (np.array(1.0, np.float32), np.array(1.01, np.float32), True, True),
        (np.array([1, 2, 3], np.int64), np.array([1, 2, 3], np.int64), False, False),
        (np.array([1, 2, 4], np.int64), np.array([1, 2, 3], np.int64), True, True),  # integers are exact
        (np.array([True, False]), np.array([True, True]), True, True),
        (np.array(7, np.int64), np.array(7, np.int64), False, False),
        (np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), True, True),  # a shape change diverges
        (np.zeros(3, np.float16), np.zeros(3, np.float32), True, True),  # so does a dtype change
        (np.array([NAN, 1.0]), np.array([NAN, 1.0]), False, False),
    ],
)
def test_changed_and_out_of_tolerance(
    actual: np.ndarray, reference: np.ndarray, changed: bool, out_of_tolerance: bool
) -> None:
    error = TOLERANCE_RULE.measure("t", np.asarray(actual), np.asarray(reference))
    assert (error.changed, error.out_of_tolerance) == (changed, out_of_tolerance)


@pytest.mark.parametrize(
    ("moved", "where"),
    [(0.0, None), (5e-6, 0), (2e-5, 0), (1e-3, 7), (1e-4, -1), (1.0, 3), (3e-5, slice(None))],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_the_element_rule_shortcut_gives_the_verdict_and_reason_of_the_full_comparison(
    moved: float, where: int | slice | None, dtype: type
) -> None:
    from monitor.compare.outputs import compare_output

    rng = np.random.default_rng(7)
    reference = rng.normal(0, 1, (4, 16)).astype(dtype)
    actual = reference.copy()
    if where is not None:
        actual.reshape(-1)[where] += dtype(moved)
    error = TOLERANCE_RULE.measure("t", actual, reference)
    full = compare_output("t", [actual], [reference], TOLERANCE_RULE.tolerance)
    assert error.out_of_tolerance == (not full)
    assert error.reasons == tuple(r.code for r in full.reasons)


def test_a_noise_floor_hides_differences_below_it() -> None:
    a, b = np.array([1.0, 2.0], np.float32), np.array([1.0, 2.0 + 2.4e-7], np.float32)
    assert TOLERANCE_RULE.measure("t", a, b).changed
    assert not TOLERANCE_RULE.measure("t", a, b, noise=1e-6).changed


def test_against_a_different_model_float_dtypes_compare_by_value() -> None:
    rule = Rule(cast_floats=True)
    error = rule.measure("t", np.array([1.0, 2.0], np.float16), np.array([1.0, 2.0], np.float32))
    assert not error.changed and not error.out_of_tolerance


def test_qdq_subject_is_paired_by_dequantize_outputs() -> None:
    from monitor.localize.search import _aliases

    subject = frozenset({"relu0", "relu0_DequantizeLinear_Output", "mm1"})
    alias = _aliases(subject, frozenset({"relu0", "mm1"}), pair_dequantized=True)
    assert alias == {"relu0_DequantizeLinear_Output": "relu0", "mm1": "mm1"}


def test_capture_records_the_level_it_ran_at(models: dict[str, Path], fused_feeds: dict[str, np.ndarray]) -> None:
    for view in ("model", "auto"):
        stored = capture_intermediates(
            models["fused"],
            fused_feeds,
            providers=CPU,
            session=PRODUCTION,
            graph_view=view,  # type: ignore[arg-type]
        )
        level = str(stored[LEVEL_KEY])
        if view == "model":
            assert level != "all" and {"mm1", "add1", "relu1"} <= set(stored)
        else:  # the fused MatMul's own output is gone from the graph ORT runs; the fusion's output is kept
            assert level == "all:optimized" and "relu1" in set(stored) and "mm1" not in stored
        report = localize(
            models["fused_perturbed"],
            fused_feeds,
            LocalizeRequest(against="baseline"),
            providers=CPU,
            session=PRODUCTION,
            reference_intermediates=stored,
        )
        assert report.graph_level == level.removesuffix(":optimized") and report.comparison == "bitwise"
        first = report.first_changed
        assert first is not None and "matmul_2" in {first.name, *first.fused_from}
        assert report.graph_view == ("optimized" if view == "auto" else "model")


def test_the_run_page_shows_a_fused_node_and_what_it_replaced_escaped() -> None:
    from monitor.api.web import localization

    hostile = "<script>alert(1)</script>"
    node = NodeDivergence(
        4, "relu_1", "Relu", ("r1",), 0.5, 2.0, 0.01, True, True, False,
        optimized_node=f"fused {hostile}/MatMulAddFusion", fused_from=("matmul_1", f"add {hostile}", "relu_1"),
    )  # fmt: skip
    report = LocalizationReport(
        model="m.onnx", against="baseline", mode="all", first_changed=node, first_out_of_tolerance=node,
        top=(node,), profile=(node,), runs=2, seconds=0.1, graph_view="optimized",
    )  # fmt: skip
    page = localization.render({"localization": LocalizationReport.from_dict(report.to_dict()).to_dict()})
    assert hostile not in page and "&lt;script&gt;" in page
    assert "which replaced" in page and "matmul_1" in page and "(optimized graph)" in page


def test_a_cnns_nchwc_tensors_map_back_to_the_models_tensors_as_plain_onnxruntime_computes_them(
    tmp_path: Path,
) -> None:
    import onnxruntime as ort

    from monitor.localize.optimized import map_optimized

    model = modelzoo.small_cnn(channels=12, blocks=3)  # 12 channels: padded to the NCHWc block
    path = modelzoo.save(model, tmp_path / "cnn.onnx")
    x = {"x": np.random.default_rng(3).normal(0, 1, (1, 3, 16, 16)).astype(np.float32)}
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    production = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, x)
    mapping = map_optimized(model, onnx.load(str(tmp_path / "optimized.onnx")))
    names = sorted(mapping.origins)
    assert {"crelu0", "crelu1", "crelu2"} <= set(names)  # blocked tensors, brought back by ReorderOutput

    def run(proto: onnx.ModelProto, level: ort.GraphOptimizationLevel) -> dict[str, np.ndarray]:
        exposed = onnx.ModelProto()
        exposed.CopyFrom(proto)
        for name in names:
            if name not in {o.name for o in exposed.graph.output}:
                exposed.graph.output.add().name = name
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        session = ort.InferenceSession(exposed.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return dict(zip([o.name for o in session.get_outputs()], session.run(None, x), strict=True))

    truth = run(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    got = run(mapping.model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert got["y"].tobytes() == production[0].tobytes()  # exposing the optimized graph changes nothing
    for name in names:
        assert got[name].shape == truth[name].shape
        np.testing.assert_allclose(got[name], truth[name], rtol=1e-4, atol=1e-5, err_msg=name)
    assert mapping.origins["crelu1"].fused_from == ("conv_1", "relu_1")


def test_intermediates_stored_before_the_optimized_view_replay_on_the_models_own_tensors(
    models: dict[str, Path], mlp_feeds: dict[str, np.ndarray]
) -> None:
    stored = capture_intermediates(models["mlp"], mlp_feeds, providers=CPU, session=PRODUCTION, graph_view="model")
    older = {k: v for k, v in stored.items() if k != LEVEL_KEY}  # a baseline captured by an earlier onnxmon
    report = localize(
        models["perturbed"], mlp_feeds, LocalizeRequest(against="baseline"), providers=CPU, session=PRODUCTION,
        reference_intermediates=older,
    )  # fmt: skip
    assert report.graph_view == "model"
    assert report.first_changed is not None and report.first_changed.name == "matmul_20"
