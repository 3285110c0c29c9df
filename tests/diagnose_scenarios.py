"""Drift scenarios with a known cause, on real models, for ``diagnose`` (tests and bench/bench_diagnose.py).

Each scenario captures a baseline of a committed corpus model, then changes one real thing the way
it happens in production and runs the check: another thread count for a tree ensemble, another
graph optimization level for a QDQ-quantized CNN, an fp16 / int8 / weight-edited model file
(``tests/variants``: onnxconverter-common, onnxruntime.quantization), and a baseline captured
under another ONNX Runtime release. One ONNX Runtime cannot be installed twice cheaply, so that
baseline is rewritten as the stored data would have it: its recorded environment names another
release and its stored outputs are the other release's numbers (this release's, moved by 2e-3
relative: a kernel change of that size); the checksums in baseline.json are updated to match.
The expected cause is the scenario's ground truth; nothing here asks onnxmon what it should be.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import CheckPlan, plan_for
from monitor.files import baselines, benchsets
from monitor.results import CheckResult
from tests import variants
from tests.workspace import Workspace

CORPUS = Path(__file__).resolve().parent / "corpus"
FOREST = CORPUS / "sklearn" / "forest_regressor.onnx"
CNN = CORPUS / "torch" / "cnn_legacy.onnx"


@dataclass(frozen=True)
class Scenario:
    name: str
    expected: str  # the cause code that is the truth of this scenario
    build: Callable[[Workspace], tuple[CheckPlan, CheckResult]]


def _forest_threads(ws: Workspace) -> tuple[CheckPlan, CheckResult]:
    """Baseline with one thread; production runs two: the tree sums reduce in another order."""
    tolerance = {"default": {"atol": 1e-7, "rtol": 0.0}}  # bit-level: the sums differ in the last ulp
    ws.add_model("forest", onnx.load(FOREST), count=3, dims={"input:0": 64}, session={"intra_op_num_threads": 1},
                 tolerance=tolerance)  # fmt: skip
    capture.capture_baseline(plan_for(ws.settings(), "forest"))
    ws.set("forest", session={"intra_op_num_threads": 2})
    plan = plan_for(ws.settings(), "forest")
    return plan, run_check(plan)


def _samples(ws: Workspace, name: str) -> list[dict[str, np.ndarray]]:
    settings = ws.settings()
    bench = benchsets.ensure(settings.benchset(f"{name}-bench"), settings.store.benchsets_dir)
    return [dict(bench.load_sample(i)) for i in range(len(bench))]


def _qdq_cnn(ws: Workspace, name: str) -> Path:
    pristine = ws.root / "pristine.onnx"
    onnx.save(onnx.load(CNN), str(pristine))
    ws.add_model(name, onnx.load(CNN), count=4, dims={"batch": 2})
    target = ws.root / "models" / f"{name}.onnx"
    variants.quantize(pristine, target, static=True, samples=_samples(ws, name))
    return target


def _qdq_opt_level(ws: Workspace) -> tuple[CheckPlan, CheckResult]:
    """A QDQ model whose baseline ran unoptimized; production's level folds QDQ into integer kernels."""
    _qdq_cnn(ws, "qdq")
    ws.set("qdq", session={"graph_optimization_level": "disable"})
    capture.capture_baseline(plan_for(ws.settings(), "qdq"))
    ws.set("qdq", session={"graph_optimization_level": "all"})
    plan = plan_for(ws.settings(), "qdq")
    return plan, run_check(plan)


def _cnn_then(edit: Callable[[Path, Path, Workspace], None]) -> Callable[[Workspace], tuple[CheckPlan, CheckResult]]:
    def build(ws: Workspace) -> tuple[CheckPlan, CheckResult]:
        ws.add_model("cnn", onnx.load(CNN), count=4, dims={"batch": 2})
        capture.capture_baseline(plan_for(ws.settings(), "cnn"))
        pristine = ws.root / "pristine.onnx"
        onnx.save(onnx.load(CNN), str(pristine))
        edit(pristine, ws.root / "models" / "cnn.onnx", ws)
        plan = plan_for(ws.settings(), "cnn")
        return plan, run_check(plan)

    return build


def _fp16(pristine: Path, target: Path, ws: Workspace) -> None:
    variants.fp16(pristine, target, keep_io_types=True)


def _int8(pristine: Path, target: Path, ws: Workspace) -> None:
    variants.quantize(pristine, target, static=True, samples=_samples(ws, "cnn"))


def _weights(pristine: Path, target: Path, ws: Workspace) -> None:
    variants.edit_largest_weight(pristine, target, None, variants.scaled)


def _runtime_release(ws: Workspace) -> tuple[CheckPlan, CheckResult]:
    """The baseline as another ONNX Runtime release stored it: its version, and its numbers."""
    ws.add_model("cnn", onnx.load(CNN), count=4, dims={"batch": 2})
    plan = plan_for(ws.settings(), "cnn")
    baseline = capture.capture_baseline(plan)
    rewrite_baseline_release(baseline, "1.17.3", relative=2e-3)
    return plan, run_check(plan)


def rewrite_baseline_release(baseline: baselines.Baseline, version: str, *, relative: float) -> None:
    """Rewrite a stored baseline as another release wrote it: recorded version, outputs, checksums."""
    meta_path = baseline.directory / baselines.META_FILE
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["environment"]["fields"]["onnxruntime.version"]["value"] = version
    for relative_path in list(meta["files"]):
        if not relative_path.startswith("outputs/"):
            continue
        path = baseline.directory / relative_path
        values = np.load(path, allow_pickle=False)
        if values.dtype.kind == "f":
            np.save(path, (values * (1 + relative)).astype(values.dtype), allow_pickle=False)
        meta["files"][relative_path] = hashlib.sha256(path.read_bytes()).hexdigest()
    meta_path.write_text(json.dumps(meta), encoding="utf-8")


SCENARIOS = (
    Scenario("tree ensemble, 1 → 2 threads", "thread_count", _forest_threads),
    Scenario("QDQ CNN, optimization disable → all", "graph_optimization", _qdq_opt_level),
    Scenario("CNN converted to fp16", "model_precision_changed", _cnn_then(_fp16)),
    Scenario("CNN quantized to int8 (QDQ)", "model_quantized", _cnn_then(_int8)),
    Scenario("CNN largest weight scaled", "model_weights_changed", _cnn_then(_weights)),
    Scenario("baseline from onnxruntime 1.17.3", "runtime_version", _runtime_release),
)
