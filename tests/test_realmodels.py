"""onnxmon over the real-model corpus (issue 12): models as their authors ship them.

Every model of ``tests/corpus/manifest.yaml`` (fetched by ``scripts/fetch-models`` into
``$ONNXMON_CORPUS_DIR``, else ``~/.cache/onnxmon-corpus``; the skl2onnx models are committed)
goes through the same scenarios:

- **baseline**: a benchset generated from its signature and the manifest's hints, verified,
  and a baseline captured from it;
- **unchanged**: three re-runs of the check on the same stack, never an alarm;
- **drift**: its largest float weight scaled by (1 + 1e-3). The check must ``fail`` with
  ``model_changed``, and each output's verdict must agree with a ground truth computed here
  with plain ONNX Runtime and numpy (the default rule ``|a-b| <= 1e-5 + 1e-4*|b|``, exact for
  integers), not with onnxmon's comparison;
- **external data** (models whose weights live beside them): a byte edited in the data file
  must be reported as ``model_changed``, naming that file.

Without the fetched cache the fetched models skip; with ``realmodels`` in ``ONNXMON_REQUIRE``
(as in CI) they fail instead.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml
from onnx import numpy_helper

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.files import benchsets
from monitor.results import CheckResult, Verdict
from tests.conftest import unavailable
from tests.workspace import Workspace

pytestmark = pytest.mark.realmodels

CORPUS = Path(__file__).resolve().parent / "corpus"
MANIFEST = CORPUS / "manifest.yaml"
ATOL, RTOL = 1e-5, 1e-4  # onnxmon's default tolerance, restated for the ground truth
DRIFT = 1e-3


@dataclass(frozen=True)
class CorpusModel:
    """One manifest entry: where its file is, what it is, how to draw its inputs."""

    name: str
    kind: tuple[str, ...]
    generate: dict[str, Any]
    relative: str  # under the cache (fetched, derived) or under tests/corpus (committed)
    committed: bool
    external_data: str | None = None


def corpus_models() -> list[CorpusModel]:
    data = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    found = [
        CorpusModel(m["name"], tuple(m["kind"]), m["generate"], f"models/{m['name']}/{Path(m['path']).name}", False)
        for m in data["models"]
    ]
    found += [
        CorpusModel(
            d["name"], tuple(d["kind"]), d["generate"], f"models/{d['name']}/model.onnx", False, d["external_data"]
        )
        for d in data.get("derived", [])
    ]
    found += [CorpusModel(c["name"], tuple(c["kind"]), c["generate"], c["file"], True) for c in data["committed"]]
    return found


MODELS = {m.name: m for m in corpus_models()}


def cache_dir() -> Path:
    import os

    return Path(os.environ.get("ONNXMON_CORPUS_DIR") or Path.home() / ".cache" / "onnxmon-corpus")


def source_file(model: CorpusModel) -> Path:
    """The pristine model file, or skip (fail where mandatory) when the corpus was not fetched."""
    if model.committed:
        return CORPUS / model.relative
    ready = cache_dir() / "READY"
    want = hashlib.sha256(MANIFEST.read_bytes()).hexdigest()
    if not ready.is_file() or ready.read_text(encoding="utf-8").strip() != want:
        unavailable("realmodels", f"corpus not fetched for this manifest in {cache_dir()}: run scripts/fetch-models")
    return cache_dir() / model.relative


@dataclass
class Prepared:
    """A workspace holding one corpus model (a private copy), its benchset and, once made, a baseline."""

    model: CorpusModel
    ws: Workspace
    path: Path  # the workspace's copy of the model file
    pristine: Path
    baseline: bool = False

    def plan(self) -> Any:
        return plan_for(self.ws.settings(), self.model.name)

    def restore(self) -> None:
        shutil.copyfile(self.pristine, self.path)
        if self.model.external_data:
            shutil.copyfile(
                self.pristine.parent / self.model.external_data, self.path.parent / self.model.external_data
            )

    def captured(self) -> Prepared:
        if not self.baseline:
            capture.capture_baseline(self.plan())
            self.baseline = True
        return self


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Prepared]]:
    yield {}


def prepare(cache: dict[str, Prepared], name: str, tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    if name in cache:
        cache[name].restore()
        return cache[name]
    model = MODELS[name]
    pristine = source_file(model)
    root = tmp_path_factory.mktemp(name)
    path = root / "models" / name / pristine.name
    path.parent.mkdir(parents=True)
    ws = Workspace(root)
    item = Prepared(model, ws, path, pristine)
    item.restore()
    ws.benchsets[name] = {
        "name": f"{name}-bench",
        "generate": {"model": str(path.relative_to(root)), "count": 4, "seed": 0, **model.generate},
    }
    ws.models[name] = {"name": name, "path": str(path.relative_to(root)), "benchset": f"{name}-bench"}
    cache[name] = item
    return item


def codes(result: CheckResult) -> set[str]:
    return {r.code for r in result.all_reasons()}


def explain(result: CheckResult) -> str:
    return f"{result.verdict.value}: " + "; ".join(f"{r.code}: {r.detail}" for r in result.all_reasons())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_baselines(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory)
    bench = benchsets.ensure(item.plan().benchset, item.plan().benchsets_dir)
    assert benchsets.verify(bench) == []
    item.captured()
    outputs = [o.name for o in ort.InferenceSession(str(item.path)).get_outputs()]
    from monitor.files import baselines

    baseline = baselines.active(item.plan().baselines_dir, name)
    assert baseline is not None and baseline.meta.sample_count == len(bench)
    assert set(outputs) <= set(baseline.meta.outputs)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_three_unchanged_reruns_never_alarm(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory).captured()
    for _ in range(3):
        result = run_check(item.plan())
        assert result.verdict is Verdict.PASS, explain(result)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_scaled_weight_is_a_fail_that_agrees_with_plain_onnxruntime(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory).captured()
    try:
        weight = perturb(item.pristine, item.path, item.model.external_data)
        result = run_check(item.plan())
        truth = ground_truth(item)
    finally:
        item.restore()
    assert result.verdict is Verdict.FAIL, explain(result)
    assert "model_changed" in codes(result) and result.attribution == "model_changed", explain(result)
    verdicts = {o.name: o.verdict for o in result.outputs}
    for output, moved in truth.items():
        want = Verdict.FAIL if moved else Verdict.PASS
        assert verdicts.get(output) is want, (
            f"{output} (scaled {weight}): plain ORT says moved={moved}, {explain(result)}"
        )


@pytest.mark.parametrize("name", sorted(n for n, m in MODELS.items() if m.external_data))
def test_an_edited_external_data_file_is_model_changed(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory).captured()
    data_name = item.model.external_data
    assert data_name is not None
    data = item.path.parent / data_name
    try:
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x01  # one low mantissa bit of one weight: the .onnx is unchanged
        data.write_bytes(bytes(raw))
        result = run_check(item.plan())
    finally:
        item.restore()
    assert result.verdict is Verdict.FAIL and result.attribution == "model_changed", explain(result)
    assert any(r.code == "model_changed" and data_name in r.detail for r in result.reasons), explain(result)


# --- the drift, and its ground truth without onnxmon's comparison --------------------------------


def float_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every float initializer and Constant value of ``graph`` and of its subgraphs (If, Loop, Scan)."""
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}
    yield from (t for t in graph.initializer if t.data_type in floats)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in floats:
                yield attr.t
            elif attr.type == onnx.AttributeProto.GRAPH:
                yield from float_tensors(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from float_tensors(sub)


def float_attributes(graph: onnx.GraphProto) -> Iterator[onnx.AttributeProto]:
    """Every list-of-floats attribute: where ai.onnx.ml models keep their weights (trees, linear models)."""
    for node in graph.node:
        for attr in node.attribute:
            # nodes_hitrates is a hint to the runtime, not a weight: scaling it changes nothing
            if attr.type == onnx.AttributeProto.FLOATS and len(attr.floats) > 1 and attr.name != "nodes_hitrates":
                yield attr
            elif attr.type == onnx.AttributeProto.GRAPH:
                yield from float_attributes(attr.g)


def perturb(pristine: Path, target: Path, external_data: str | None) -> str:
    """Write ``pristine`` to ``target`` with its largest float weight scaled by (1 + DRIFT); which one.

    The weight is the largest float initializer or Constant (subgraphs included); a model with
    none (skl2onnx trees and linear models) has its largest float-list attribute scaled instead.
    """
    model = onnx.load(str(pristine))
    tensors = list(float_tensors(model.graph))
    if tensors:
        largest = max(tensors, key=lambda t: int(np.prod(t.dims, dtype=np.int64)))
        array = numpy_helper.to_array(largest)
        largest.CopyFrom(numpy_helper.from_array((array * (1 + DRIFT)).astype(array.dtype), largest.name))
        what = f"tensor {largest.name or '(a Constant)'} {list(array.shape)}"
    else:
        attribute = max(float_attributes(model.graph), key=lambda a: len(a.floats))
        scaled = (np.array(attribute.floats, dtype=np.float32) * np.float32(1 + DRIFT)).tolist()
        attribute.floats[:] = scaled
        what = f"attribute {attribute.name} [{len(scaled)}]"
    if external_data:
        (target.parent / external_data).unlink()  # onnx appends to an existing data file
        onnx.save_model(model, str(target), save_as_external_data=True, location=external_data, size_threshold=1024)
    else:
        onnx.save_model(model, str(target))
    return what


def ground_truth(item: Prepared) -> dict[str, bool]:
    """Per output: does the perturbed model's output break |a-b| <= atol + rtol*|b| on any sample?"""
    bench = benchsets.open_benchset(item.plan().benchsets_dir, f"{item.model.name}-bench")
    before = ort.InferenceSession(str(item.pristine), providers=["CPUExecutionProvider"])
    after = ort.InferenceSession(str(item.path), providers=["CPUExecutionProvider"])
    names = [o.name for o in before.get_outputs()]
    moved = dict.fromkeys(names, False)
    for index in range(len(bench)):
        feeds = bench.load_sample(index)
        for name, a, b in zip(names, after.run(None, feeds), before.run(None, feeds), strict=True):
            moved[name] = moved[name] or differs(a, b)
    return moved


def differs(actual: Any, expected: Any) -> bool:
    """Plain ORT values compared by hand: maps by key, sequences element by element, strings exactly."""
    if isinstance(expected, dict):  # a map (one row of a ZipMap): same keys, each value alike
        return set(actual) != set(expected) or any(
            differs(np.array(actual[k]), np.array(expected[k])) for k in expected
        )
    if isinstance(expected, list):  # a sequence: of maps (a ZipMap) or of tensors
        return len(actual) != len(expected) or any(differs(a, b) for a, b in zip(actual, expected, strict=True))
    a, b = np.asarray(actual), np.asarray(expected)
    if a.shape != b.shape or a.dtype != b.dtype:
        return True
    if a.dtype.kind not in "fc":
        return bool(np.any(a != b))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    same_nonfinite = (np.isnan(a64) & np.isnan(b64)) | (np.isinf(a64) & (a64 == b64))
    with np.errstate(invalid="ignore"):
        close = np.abs(a64 - b64) <= ATOL + RTOL * np.abs(b64)
    return bool(np.any(~(close | same_nonfinite)))
