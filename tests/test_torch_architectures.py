"""The real-architecture journey: library models, both exporters, every mistake, through the CLI.

The models (``tests/torch_architectures.py``) are built by torchvision (a MobileNetV3 CNN, an
LRASPP segmenter with a bilinear Resize), timm (a ViT), transformers (a BERT encoder, a GPT-2
decoder) and torch.nn (an LSTM+GRU tagger), small, seeded, with no weights downloaded. Each is
exported with the legacy (TorchScript) and the dynamo exporter, and each scenario a user meets is
run through ``onnxmon reference torch`` / ``lint`` / ``check`` / ``localize`` / ``diagnose``:
eval, train mode, preprocessing, an edited Resize mode, a baked batch and sequence, fp16, int8 and
a weight edit. The ground truth is plain torch, plain ONNX Runtime and numpy (the verdict, the
error) and the model file itself (which node is faulty), never onnxmon.

Skipped, naming the missing package, without torch, onnxscript, torchvision, timm or transformers;
mandatory where ``ONNXMON_REQUIRE`` names ``torch`` (``tests/conftest.py``).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from monitor.cli import main
from tests.conftest import TORCH_INSTALL, unavailable

pytestmark = [pytest.mark.torch, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
ARCHS_PY = HERE / "torch_architectures.py"
LIBRARIES = ("torch", "onnxscript", "torchvision", "timm", "transformers")
ATOL, RTOL = 1e-4, 1e-3
SAMPLES = 2
ALL = ["cnn", "vit", "bert", "gpt2", "rnn", "seg"]
EXPORTERS = ["legacy", "dynamo"]

Export = Callable[..., Path]


def need_libraries() -> None:
    """Skip naming the first missing library (torch first), or fail where ``ONNXMON_REQUIRE`` names torch."""
    for name in LIBRARIES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            unavailable("torch", f"{name} is not installed ({exc}): {TORCH_INSTALL} and .ci/run's torch step")


@pytest.fixture(scope="session")
def archs() -> ModuleType:
    """``tests/torch_architectures.py`` with its libraries, or skip (fail under ONNXMON_REQUIRE=torch)."""
    need_libraries()
    return importlib.import_module("tests.torch_architectures")


@pytest.mark.parametrize("missing", LIBRARIES)
def test_the_suite_skips_naming_the_missing_library_and_fails_where_torch_is_required(
    monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # an import of it now raises ImportError
    monkeypatch.delenv("ONNXMON_REQUIRE", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        need_libraries()
    first_missing = next(n for n in LIBRARIES if n == missing or importlib.util.find_spec(n) is None)
    assert str(skipped.value).startswith(f"torch unavailable: {first_missing} is not installed"), skipped.value
    monkeypatch.setenv("ONNXMON_REQUIRE", "postgres,torch")
    with pytest.raises(pytest.fail.Exception, match=f"torch suite is mandatory.*{first_missing} is not installed"):
        need_libraries()


@pytest.fixture(scope="session")
def exported(archs: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Export:
    """``exported(name, exporter, train=False)``: that export's path, made once per session."""
    root = tmp_path_factory.mktemp("architectures")
    cache: dict[tuple[str, str, bool], Path] = {}

    def get(name: str, exporter: str, train: bool = False) -> Path:
        key = (name, exporter, train)
        if key not in cache:
            cache[key] = archs.export(root / f"{name}_{exporter}_{train}.onnx", name, exporter, train=train)
        return cache[key]

    return get


class Space:
    """One model ``m`` in a fresh config with a seeded benchmark set; the CLI run in-process."""

    def __init__(self, root: Path, archs: ModuleType, model: Path, name: str, *, level: str = "all") -> None:
        self.root, self.name, self.base = root, name, name.removesuffix("_baked")
        self.model = root / "m.onnx"
        shutil.copyfile(model, self.model)
        shutil.copyfile(ARCHS_PY, root / "archs.py")
        self.input = archs.SPECS[self.base][0]
        self.feeds = [archs.example(name, seed=10 + i).numpy() for i in range(SAMPLES)]
        for index, array in enumerate(self.feeds):
            np.savez(root / f"s{index}.npz", **{self.input: array})
        files = ", ".join(f"s{i}.npz" for i in range(SAMPLES))
        (root / "onnxmon.yaml").write_text(
            "store: {url: 'sqlite:///h.db', baselines_dir: baselines, benchsets_dir: benchsets}\n"
            f"defaults: {{tolerance: {{atol: {ATOL}, rtol: {RTOL}}}, timeout: 120s}}\n"
            f"benchsets: [{{name: inputs, npz: [{files}]}}]\n"
            "models:\n"
            f"  - {{name: m, path: m.onnx, benchset: inputs, providers: [CPUExecutionProvider],"
            f" session: {{graph_optimization_level: {level}}}}}\n",
            encoding="utf-8",
        )

    def run(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main([*args, "-c", str(self.root / "onnxmon.yaml")])
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    def reference(self, capsys: pytest.CaptureFixture[str], factory: str | None = None) -> tuple[int, str]:
        spec = factory or f"{self.root / 'archs.py'}:make_{self.name}"
        return self.run(capsys, "reference", "torch", "m", "--factory", spec, "--intermediates")

    def json(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
        code, out = self.run(capsys, *args, "--json")
        starts = [i for i in (out.find("["), out.find("{")) if i >= 0]
        try:
            return code, json.loads(out[min(starts) :]) if starts else None, out
        except json.JSONDecodeError:
            return code, None, out

    def check(self, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
        code, document, out = self.json(capsys, "check", "m", "--no-store")
        assert isinstance(document, list), out
        return code, document[0]

    def torch_truth(self, archs: ModuleType) -> list[np.ndarray]:
        """The eval module's outputs on the benchmark set, in plain torch."""
        import torch

        module = archs.make(self.name)
        with torch.no_grad():
            return [module(torch.from_numpy(x)).numpy() for x in self.feeds]

    def ort_truth(self) -> list[np.ndarray]:
        """The model file's outputs in plain ONNX Runtime at the config's level (all)."""
        session = ort.InferenceSession(str(self.model), providers=["CPUExecutionProvider"])
        return [session.run(None, {self.input: x})[0] for x in self.feeds]


@pytest.fixture
def space(archs: ModuleType, tmp_path: Path) -> Callable[..., Space]:
    def make(model: Path, name: str, **kw: Any) -> Space:
        return Space(tmp_path, archs, model, name, **kw)

    return make


def ratio(actual: list[np.ndarray], expected: list[np.ndarray]) -> tuple[float, float]:
    """(max |a-b|, max |a-b| / (atol + rtol*|b|)) over the samples: the ground-truth verdict is ratio > 1."""
    worst_abs = worst_ratio = 0.0
    for a, b in zip(actual, expected, strict=True):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        worst_abs = max(worst_abs, float(diff.max()))
        worst_ratio = max(worst_ratio, float((diff / (ATOL + RTOL * np.abs(b.astype(np.float64)))).max()))
    return worst_abs, worst_ratio


def lint_codes(ws: Space, capsys: pytest.CaptureFixture[str]) -> dict[str, list[dict[str, Any]]]:
    _, document, out = ws.json(capsys, "lint", str(ws.model))
    assert isinstance(document, dict), out
    found: dict[str, list[dict[str, Any]]] = {}
    for hazard in document["hazards"]:
        found.setdefault(hazard["code"], []).append(hazard)
    return found


def causes(ws: Space, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """``diagnose``'s causes, most likely first; never a GPU library on this CPU-only stack."""
    code, document, out = ws.json(capsys, "diagnose", "m", "--no-store", "--budget", "120")
    assert code in (0, 1) and document is not None, out
    found = [h["cause"] for h in _find(document, "hypotheses")]
    assert "gpu_library_version" not in found, out
    return found


def _find(document: Any, key: str) -> list[Any]:
    if isinstance(document, dict):
        if key in document:
            return list(document[key])
        return [x for value in document.values() for x in _find(value, key)]
    return []


def nodes(path: Path) -> list[onnx.NodeProto]:
    return list(onnx.load(str(path)).graph.node)


def no_cuda_in_the_reference(ws: Space) -> None:
    """The reference snapshots the ONNX Runtime stack, not the CUDA libraries a CUDA torch mapped."""
    (meta,) = (ws.root / "baselines" / "m").rglob("baseline.json")
    fields = json.loads(meta.read_text(encoding="utf-8"))["environment"]["fields"]
    assert not [name for name in fields if name.startswith("cuda.")], sorted(fields)


# --- eval exports pass, with the error equal to the ground truth ------------------------------------


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("name", ALL)
def test_an_eval_export_passes_against_its_library_module(
    archs: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    name: str, exporter: str,
) -> None:  # fmt: skip
    ws = space(exported(name, exporter), name)
    worst_abs, worst_ratio = ratio(ws.ort_truth(), ws.torch_truth(archs))
    assert worst_ratio <= 1, (worst_abs, worst_ratio)  # ground truth: a correct export agrees
    errors = {c: h for c, h in lint_codes(ws, capsys).items() if any(x["severity"] == "error" for x in h)}
    assert errors == {}
    code, out = ws.reference(capsys)
    assert code == 0, out
    no_cuda_in_the_reference(ws)
    code, result = ws.check(capsys)
    assert code == 0 and result["verdict"] == "pass", result["reasons"]
    assert result["outputs"][0]["metrics"]["max_abs_error"] == pytest.approx(worst_abs, rel=1e-6, abs=1e-9)
    assert not [c for c in result["details"].get("env_diff", []) if c.get("stable")]


# --- train-mode exports: lint names the hazard in both exporters; the verdict follows the truth --------


def _first(path: Path, *op_types: str) -> onnx.NodeProto | None:
    return next((n for n in nodes(path) if n.op_type in op_types), None)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("name", ["cnn", "bert"])
def test_a_train_mode_export_is_linted_and_judged_against_the_eval_module(
    archs: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    name: str, exporter: str,
) -> None:  # fmt: skip
    """The user forgot ``.eval()`` before exporting; the reference is the eval module, as deployed."""
    path = exported(name, exporter, train=True)
    ws = space(path, name)
    found = lint_codes(ws, capsys)
    assert "dropout_training" in found, found  # both library models have Dropout; both exporters keep it
    if name == "cnn" and exporter == "legacy":
        batchnorm = _first(path, "BatchNormalization")
        assert batchnorm is not None and len(batchnorm.output) > 1  # ground truth: training outputs
        assert batchnorm.name in {h["node"] for h in found.get("batchnorm_training", [])}, found
    _, worst_ratio = ratio(ws.ort_truth(), ws.torch_truth(archs))
    code, out = ws.reference(capsys)
    assert code == 0, out
    code, result = ws.check(capsys)
    assert result["verdict"] == ("fail" if worst_ratio > 1 else "pass"), (worst_ratio, result["reasons"])
    if result["verdict"] == "pass":
        return
    assert code == 1 and result["all_reasons"], result  # the top carries the code (issue 27, 9)
    code, report, out = ws.json(capsys, "localize", "m")
    assert code == 1, out
    faulty = _first(path, "BatchNormalization") if name == "cnn" and exporter == "legacy" else None
    faulty = faulty or _first(path, "Dropout", "RandomUniformLike", "RandomUniform", "Bernoulli")
    assert faulty is not None
    assert report["first_changed"]["name"] == faulty.name, (report["first_changed"], faulty.name)
    assert causes(ws, capsys)[0] == "export_training_mode"


# --- preprocessing: what the reference fed differs from the benchmark set -----------------------------

BGR = "import numpy as np\nfrom archs import make_cnn\n\n\ndef make_inputs(sample):\n" \
      "    return np.ascontiguousarray(sample['image'][:, ::-1])\n"  # fmt: skip
SCALED = "from archs import make_vit\n\n\ndef make_inputs(sample):\n    return sample['image'] / 255.0\n"


@pytest.mark.parametrize(
    ("name", "exporter", "body", "described"),
    [("cnn", "legacy", BGR, "(BGR vs RGB)"), ("vit", "dynamo", SCALED, "scale")],
    ids=["cnn-bgr", "vit-255"],
)
def test_a_preprocessing_mistake_is_input_mismatch_and_diagnosed_so(
    exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    name: str, exporter: str, body: str, described: str,
) -> None:  # fmt: skip
    ws = space(exported(name, exporter), name)
    (ws.root / "factory.py").write_text(body, encoding="utf-8")
    code, out = ws.reference(capsys, f"{ws.root / 'factory.py'}:make_{name}")
    assert code == 1 and "input_mismatch" in out and described in out, out
    code, result = ws.check(capsys)
    assert code == 1 and "input_mismatch" in {r["code"] for r in result["reasons"]}
    assert causes(ws, capsys)[0] == "input_mismatch"


# --- an edited Resize coordinate mode: lint, localize (and its graph view), diagnose -----------------


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_an_edited_resize_mode_is_linted_localized_drawn_and_diagnosed(
    archs: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    tmp_path: Path, exporter: str,
) -> None:  # fmt: skip
    import jsonschema

    from tests.test_localize_cli import MODEL_NODE_DATA

    model = onnx.load(str(exported("seg", exporter)))
    resizes = [n for n in model.graph.node if n.op_type == "Resize"]
    assert resizes  # ground truth: torchvision's LRASPP upsamples bilinearly
    edited = resizes[-1]  # to the input's size (the first one maps the 1/8 map onto itself under dilation)
    assert [a.s for a in edited.attribute if a.name == "mode"] == [b"linear"]
    for attribute in edited.attribute:
        if attribute.name == "coordinate_transformation_mode":
            attribute.s = b"align_corners"
    path = tmp_path / "edited.onnx"
    onnx.save(model, str(path))
    ws = space(path, "seg")
    assert edited.name in {h["node"] for h in lint_codes(ws, capsys).get("resize_mode", [])}
    _, worst_ratio = ratio(ws.ort_truth(), ws.torch_truth(archs))
    assert worst_ratio > 1  # ground truth: the edited mode departs from torch
    assert ws.reference(capsys)[0] == 0
    code, result = ws.check(capsys)
    assert code == 1 and result["verdict"] == "fail"
    drawn = tmp_path / "seg.nodes.json"
    code, report, out = ws.json(capsys, "localize", "m", "--model-explorer", str(drawn))
    assert code == 1, out
    assert report["first_changed"]["name"] == edited.name
    data = json.loads(drawn.read_text(encoding="utf-8"))
    jsonschema.validate(data, MODEL_NODE_DATA)  # Model Explorer's node-data format
    results = data[model.graph.name]["results"]
    assert set(results) <= {n.name for n in model.graph.node}  # model-explorer-onnx's node ids
    # the first changed node (the edited Resize) is drawn apart from what it drives downstream
    assert results[edited.name]["bgColor"] == "#9467bd"
    downstream = [n["name"] for n in report["profile"] if n.get("out_of_tolerance") and n["name"] != edited.name]
    assert all(results[name]["bgColor"] == "#d62728" for name in downstream if name in results)
    assert report["first_out_of_tolerance"]["name"] in {edited.name, *downstream}
    assert causes(ws, capsys)[0] == "export_resize_mode"


# --- baked batch and sequence: lint names them; at the example's shape the check agrees with torch ---------


@pytest.mark.parametrize(("name", "hazard"), [("rnn_baked", "baked_batch"), ("bert_baked", "baked_dim")])
def test_a_baked_batch_or_sequence_is_linted_and_the_check_follows_the_truth(
    archs: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    name: str, hazard: str,
) -> None:  # fmt: skip
    path = exported(name, "legacy")
    reshapes = [n for n in nodes(path) if n.op_type == "Reshape"]
    assert reshapes  # ground truth: the user's reshape with a constant
    ws = space(path, name)
    found = lint_codes(ws, capsys)
    assert hazard in found and {h["node"] for h in found[hazard]} <= {n.name for n in reshapes}, found
    _, worst_ratio = ratio(ws.ort_truth(), ws.torch_truth(archs))
    assert ws.reference(capsys)[0] == 0
    code, result = ws.check(capsys)
    assert (code, result["verdict"]) == ((1, "fail") if worst_ratio > 1 else (0, "pass")), result["all_reasons"]


# --- fp16 and int8 builds checked directly against PyTorch (the verify flow) ------------------------------


def _fp16(source: Path, target: Path) -> Path:
    from onnxconverter_common import float16

    onnx.save(float16.convert_float_to_float16(onnx.load(str(source)), keep_io_types=True), str(target))
    return target


def _int8(archs: ModuleType, source: Path, target: Path, name: str) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    input_name = archs.SPECS[name][0]
    items = iter([{input_name: archs.example(name, seed=100 + i).numpy()} for i in range(4)])

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(items, None)

    quantize_static(str(source), str(target), Reader(), weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
    return target


def _ort_crashes(path: Path, input_name: str, feed: np.ndarray, root: Path) -> bool:
    """Ground truth, in a child: does plain ONNX Runtime die (a signal) running this file?"""
    import subprocess
    import sys

    np.save(root / "feed.npy", feed)
    script = (
        "import numpy as np, onnxruntime as ort, sys\n"
        f"s = ort.InferenceSession({str(path)!r}, providers=['CPUExecutionProvider'])\n"
        f"s.run(None, {{{input_name!r}: np.load({str(root / 'feed.npy')!r})}})\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    return done.returncode < 0


@pytest.mark.parametrize(("name", "build"), [("cnn", "fp16"), ("rnn", "fp16"), ("cnn", "int8")])
def test_a_lower_precision_build_is_judged_against_pytorch_and_never_crashes_onnxmon(
    archs: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    tmp_path: Path, name: str, build: str,
) -> None:  # fmt: skip
    source = exported(name, "legacy")
    target = tmp_path / f"{name}_{build}.onnx"
    path = _fp16(source, target) if build == "fp16" else _int8(archs, source, target, name)
    ws = space(path, name)
    crashes = _ort_crashes(ws.model, ws.input, ws.feeds[0], tmp_path)
    assert ws.reference(capsys)[0] in (0, 3)
    code, result = ws.check(capsys)
    code_localize, report, out = ws.json(capsys, "localize", "m")
    if crashes:  # ORT itself dies on this file: onnxmon says so, exit 3, never a signal
        assert code == 3 and result["verdict"] == "error" and result["reasons"], result
        assert code_localize == 3 and "crash" in out.lower(), out
        return
    worst_abs, worst_ratio = ratio(ws.ort_truth(), ws.torch_truth(archs))
    assert result["verdict"] == ("fail" if worst_ratio > 1 else "pass"), (worst_ratio, result["reasons"])
    assert result["outputs"][0]["metrics"]["max_abs_error"] == pytest.approx(worst_abs, rel=1e-6, abs=1e-9)
    assert code_localize in (0, 1), out
    assert all(np.isfinite(node["rel_error"]) for node in report["top"]), report["top"]  # compared in float64
    if result["verdict"] == "fail":
        expected = "model_quantized" if build == "int8" else "model_precision_changed"
        assert causes(ws, capsys)[0] == expected


# --- a weight edited after the reference was made -----------------------------------------------------------


def _edit_one_weight(path: Path, target: Path) -> str:
    """Scale the weight of one mid-graph MatMul/Gemm/Conv used by that node only; that node's name."""
    model = onnx.load(str(path))
    weights = {i.name: i for i in model.graph.initializer}
    uses: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    candidates = [n for n in model.graph.node if n.op_type in ("MatMul", "Gemm", "Conv") and len(n.input) > 1
                  and n.input[1] in weights and uses[n.input[1]] == 1]  # fmt: skip
    node = candidates[len(candidates) // 2]
    weight = weights[node.input[1]]
    array = numpy_helper.to_array(weight)
    weight.CopyFrom(numpy_helper.from_array((array * 1.5 + 0.05).astype(array.dtype), weight.name))
    onnx.save(model, str(target))
    return node.name


@pytest.mark.parametrize(("name", "exporter"), [("vit", "dynamo"), ("gpt2", "legacy")])
def test_a_weight_edit_after_the_reference_is_localized_and_diagnosed(
    archs: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    tmp_path: Path, name: str, exporter: str,
) -> None:  # fmt: skip
    ws = space(exported(name, exporter), name)
    assert ws.reference(capsys)[0] == 0
    node = _edit_one_weight(ws.model, tmp_path / "edited.onnx")
    shutil.copyfile(tmp_path / "edited.onnx", ws.model)
    _, worst_ratio = ratio(ws.ort_truth(), ws.torch_truth(archs))
    assert worst_ratio > 1  # ground truth: the edit shows at the output
    code, result = ws.check(capsys)
    assert code == 1 and result["verdict"] == "fail"
    code, report, out = ws.json(capsys, "localize", "m")
    assert code == 1, out
    first = report["first_changed"]["name"]
    by_name = {n.name: n for n in nodes(ws.model)}
    # the edited node, or its module's output (the reference has module outputs: a Linear's Add, a view)
    assert first == node or _module(by_name[first]) == _module(by_name[node]), (first, node)
    assert causes(ws, capsys)[0] == "model_weights_changed"


def _module(node: onnx.NodeProto) -> str:
    """The torch module a node was exported from: dynamo's name-scope metadata, else the legacy name's scope."""
    scopes = [p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"]
    return scopes[0] if scopes else node.name.rsplit("/", 1)[0]


# --- localize --against self on a model made nondeterministic by its export -----------------------------------


def test_against_self_names_the_random_mask_of_a_train_mode_dropout(
    exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str]
) -> None:
    """dynamo writes mobilenet_v3_small's train-mode ``nn.Dropout`` as random ops: identical runs differ there."""
    path = exported("cnn", "dynamo", train=True)
    ws = space(path, "cnn")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    runs = [session.run(None, {"image": ws.feeds[0]})[0] for _ in range(2)]
    assert not np.array_equal(runs[0], runs[1])  # ground truth: random at level all
    random = _first(path, "RandomUniformLike", "RandomUniform", "RandomNormalLike", "Bernoulli", "Dropout")
    assert random is not None
    code, report, out = ws.json(capsys, "localize", "m", "--against", "self", "--runs", "3")
    assert code in (0, 1), out
    assert report["against"] == "self"
    assert report["first_changed"]["name"] == random.name, report["first_changed"]
