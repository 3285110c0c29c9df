"""The optimized graph mapped back to the model, on real corpus models (issue 13).

ORT at level ``all`` fuses nodes (Conv+BiasAdd+Relu, MatMul+Add, SkipLayerNormalization) and, on
CPU, computes CNNs in the blocked NCHWc layout under names of its own (``reorder_token_*``).
``monitor.localize.optimized`` says which model tensor each optimized tensor holds. Ground truth
is plain ONNX Runtime: the optimized graph is saved with ``SessionOptions.optimized_model_filepath``
here, the model's own tensors are read from a plain unoptimized session with every tensor made a
graph output, and production's final outputs from a plain session at level ``all``.

* every tensor the map claims must be the model's tensor: same shape and dtype as the unoptimized
  run's, values within rounding of it (a wrong tensor or a wrong layout is far off), and exposing
  them all leaves the final outputs bitwise production's;
* on the CNNs the blocked tensors are recovered (more model tensors than ORT's names alone give),
  and the fused node of a Conv names the Conv among the model nodes it replaced.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.files import benchsets
from monitor.localize.engine import capture_intermediates, localize
from monitor.localize.graph import node_outputs
from monitor.localize.optimized import map_optimized
from monitor.localize.request import LocalizeRequest
from tests import variants
from tests.realmodels import Prepared, prepare

pytestmark = pytest.mark.realmodels

CPU = [ProviderSpec(name="CPUExecutionProvider")]
CNNS = ["vietcombank-captcha", "torch-cnn-legacy", "torch-cnn-dynamo"]
# CNNs, a fp16 CNN (ORT runs it in fp32 under InsertedPrecisionFreeCast_ names), transformers
# (a torch encoder, ALBERT, T5 with QDQ-free MatMulInteger): fusions of every kind.
MODELS = [*CNNS, "slovorez", "torch-encoder-dynamo", "sudachi-b", "traceforge-decoder"]


@pytest.fixture(scope="module")
def prepared() -> Iterator[dict[str, Prepared]]:
    yield {}


def _feeds(item: Prepared) -> dict[str, np.ndarray]:
    plan = item.plan()
    benchsets.ensure(plan.benchset, plan.benchsets_dir)  # generated from the model's signature
    return item.samples()[0]


def _plain(path: Path, level: ort.GraphOptimizationLevel, optimized: Path | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "opt.data")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _exposing(model: onnx.ModelProto, names: list[str], directory: Path, stem: str) -> Path:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    present = {o.name for o in copy.graph.output}
    for name in names:
        if name not in present:
            copy.graph.output.add().name = name
    path = directory / f"{stem}.onnx"
    onnx.save(copy, str(path), save_as_external_data=True, location=f"{stem}.data", size_threshold=1024)
    return path


def _run(session: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    return dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in wanted}), strict=True))


@pytest.mark.parametrize("name", MODELS)
def test_every_tensor_the_map_claims_is_the_models_tensor_and_production_is_unchanged(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    item = prepare(prepared, name, tmp_path_factory)
    feeds = _feeds(item)
    model = onnx.load(str(item.path))
    production = _run(_plain(item.path, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, tmp_path / "opt.onnx"), feeds)
    optimized = onnx.load(str(tmp_path / "opt.onnx"))
    mapping = map_optimized(model, optimized)
    claimed = sorted(mapping.origins)
    assert claimed, f"{name}: the map holds none of the model's tensors"

    unoptimized = _exposing(model, node_outputs(model), tmp_path, "model")
    truth = _run(_plain(unoptimized, ort.GraphOptimizationLevel.ORT_DISABLE_ALL), feeds)
    exposed = _exposing(mapping.model, claimed, tmp_path, "mapped")
    got = _run(_plain(exposed, ort.GraphOptimizationLevel.ORT_DISABLE_ALL), feeds)

    for output, value in production.items():
        assert got[output].tobytes() == value.tobytes(), f"{name}: exposing the mapped tensors changed {output!r}"
    wrong = []
    for tensor in claimed:
        want, have = np.asarray(truth[tensor]), np.asarray(got[tensor])
        if want.shape != have.shape or want.dtype != have.dtype:
            wrong.append(f"{tensor}: {have.dtype}{list(have.shape)} vs the model's {want.dtype}{list(want.shape)}")
            continue
        if want.dtype.kind != "f" or want.size == 0:
            continue
        w, h = want.astype(np.float64), have.astype(np.float64)
        finite = np.isfinite(w) & np.isfinite(h)
        scale = float(np.abs(w[finite]).max(initial=0.0))
        worst = float(np.abs(w[finite] - h[finite]).max(initial=0.0))
        # Fusions re-associate sums: rounding, far below what a wrong tensor or a wrong layout gives;
        # float16 tensors and integer kernels (MatMulIntegerToFloat in place of DynamicQuantize +
        # MatMulInteger) round more, and the rounding grows downstream.
        coarse = want.dtype == np.float16 or "quantized" in item.model.kind
        limit = (2e-2 if coarse else 1e-3) * max(scale, 1.0)
        norms = float(np.linalg.norm(w[finite]) * np.linalg.norm(h[finite]))
        cosine = float(np.dot(w[finite], h[finite]) / norms) if norms > 0 else 1.0
        # With integer kernels an int8 rounding flipped upstream can move a value a lot; the tensor is
        # still the same one when it points the same way (a wrong tensor or layout does not).
        close = worst <= limit or (coarse and cosine >= 0.995)
        if not close or not np.array_equal(np.isfinite(w), np.isfinite(h)):
            wrong.append(f"{tensor}: max |diff| {worst:.3g} over a scale of {scale:.3g}, cosine {cosine:.4f}")
    assert not wrong, f"{name}: the map names the wrong model tensor for {wrong}"

    kept_by_name = {t for n in optimized.graph.node for t in n.output} & set(node_outputs(model))
    fused = {t: o for t, o in mapping.origins.items() if o.fused_from}
    print(f"{name}: {mapping.describe()}; ORT's names alone keep {len(kept_by_name)}")
    if name in CNNS:
        assert mapping.kept > len(kept_by_name), f"{name}: no NCHWc tensor was mapped back"
        conv_ops = {n.name for n in model.graph.node if n.op_type == "Conv"}
        assert any(conv_ops & set(o.fused_from) for o in fused.values()), f"{name}: no fused Conv found"
    model_nodes = {n.name for n in model.graph.node}
    for origin in mapping.origins.values():
        assert set(origin.fused_from) <= model_nodes


@pytest.mark.parametrize("name", CNNS)
def test_a_changed_conv_weight_on_the_optimized_graph_is_named_with_the_fused_node(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory)
    feeds = _feeds(item)
    stored = capture_intermediates(item.path, feeds, providers=CPU, session=SessionConfig(), graph_view="optimized")
    variants.edit_largest_weight(item.pristine, item.path, item.model.external_data, variants.scaled)
    changed = {  # ground truth, plain onnx: the nodes that read an initializer the edit changed
        n.name
        for n in onnx.load(str(item.path)).graph.node
        if set(n.input) & _changed_initializers(item.pristine, item.path)
    }
    report = localize(
        item.path,
        feeds,
        LocalizeRequest(against="baseline"),
        providers=CPU,
        session=SessionConfig(),
        reference_intermediates=stored,
    )
    first = report.first_changed
    assert report.graph_view == "optimized" and report.graph_level == "all" and report.comparison == "bitwise"
    assert first is not None and not first.inputs_changed
    assert changed & {first.name, *first.fused_from}, (first, changed)
    assert first.optimized_node and first.optimized_node not in {n.name for n in onnx.load(str(item.path)).graph.node}


def _changed_initializers(before: Path, after: Path) -> set[str]:
    old = {t.name: t.raw_data or t.SerializeToString() for t in onnx.load(str(before)).graph.initializer}
    return {
        t.name
        for t in onnx.load(str(after)).graph.initializer
        if old.get(t.name) != (t.raw_data or t.SerializeToString())
    }
