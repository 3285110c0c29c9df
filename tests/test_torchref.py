"""PyTorch references through the public CLI: a real torch, both exporters, a CNN and a Transformer block.

``onnxmon reference torch`` stores the PyTorch module's outputs (and layers, under ONNX tensor
names) as the baseline; ``check`` then compares ONNX Runtime with PyTorch and ``localize`` names the
first ONNX node departing from it. Ground truth comes from plain torch and onnxruntime (outputs)
and from the model file itself (which node is the train-mode BatchNorm, the edited Resize), never
from onnxmon. The models are ``examples/torch/models.py``; each export is made once per session.

Without torch the suite skips; with ``torch`` in ``ONNXMON_REQUIRE`` (CI) it is mandatory.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml

from monitor.cli import main
from tests.conftest import need_torch

pytestmark = pytest.mark.torch  # torch's tests start processes once torch is there (tests/tiers.py)

ROOT = Path(__file__).resolve().parents[1]
MODELS_PY = ROOT / "examples" / "torch" / "models.py"
SAMPLES = 3
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)

Export = Callable[..., Path]


@pytest.fixture(scope="session")
def models() -> ModuleType:
    """``examples/torch/models.py`` with a real torch (and onnxscript for the dynamo exporter), or skip/fail."""
    need_torch()
    spec = importlib.util.spec_from_file_location("onnxmon_test_torch_models", MODELS_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def exported(models: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Export:
    """``exported(model, exporter, train=False)``: the path of that export, made once per session."""
    root = tmp_path_factory.mktemp("torch-exports")
    cache: dict[tuple[str, str, bool], Path] = {}

    def get(model: str, exporter: str, train: bool = False) -> Path:
        key = (model, exporter, train)
        if key not in cache:
            path = root / f"{model}_{exporter}_{'train' if train else 'eval'}.onnx"
            cache[key] = models.export(path, model=model, exporter=exporter, train=train)
        return cache[key]

    return get


class Space:
    """One model ``m`` in a fresh config, its benchmark set written with numpy, the CLI run in-process."""

    def __init__(self, root: Path, model: Path, kind: str, *, level: str = "all") -> None:
        self.root = root
        self.model = root / "m.onnx"
        self.model.write_bytes(model.read_bytes())
        rng = np.random.default_rng(7)
        self.name = "image" if kind == "cnn" else "embeddings"
        shape = (2, 3, 32, 32) if kind == "cnn" else (2, 12, 32)
        self.feeds = [rng.uniform(-2.0, 2.0, shape).astype(np.float32) for _ in range(SAMPLES)]
        for index, array in enumerate(self.feeds):
            np.savez(root / f"s{index}.npz", **{self.name: array})
        files = ", ".join(f"s{i}.npz" for i in range(SAMPLES))
        (root / "onnxmon.yaml").write_text(
            "store: {url: 'sqlite:///h.db', baselines_dir: baselines, benchsets_dir: benchsets}\n"
            "defaults: {tolerance: {atol: 1.0e-4, rtol: 1.0e-3}, timeout: 120s}\n"
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

    def reference(self, capsys: pytest.CaptureFixture[str], factory: str, *extra: str) -> tuple[int, str]:
        return self.run(capsys, "reference", "torch", "m", "--factory", factory, *extra)

    def check(self, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
        code, out = self.run(capsys, "check", "m", "--json", "--no-store")
        (result,) = json.loads(out[out.index("[") :])
        return code, result

    def localize(self, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
        code, out = self.run(capsys, "localize", "m", "--json")
        return code, json.loads(out[out.index("{") :])


@pytest.fixture
def space(tmp_path: Path) -> Iterator[Callable[..., Space]]:
    def make(model: Path, kind: str, **kw: Any) -> Space:
        return Space(tmp_path, model, kind, **kw)

    yield make


def factory_of(kind: str) -> str:
    return f"{MODELS_PY}:{'make_cnn' if kind == 'cnn' else 'make_encoder'}"


def torch_outputs(models: ModuleType, kind: str, feeds: list[np.ndarray]) -> list[np.ndarray]:
    import torch

    module = models.make_cnn() if kind == "cnn" else models.make_encoder()
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # the path the exporters trace (docs/pytorch.md)
    try:
        with torch.no_grad():
            return [module(torch.from_numpy(x)).numpy() for x in feeds]
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)


def ort_outputs(path: Path, name: str, feeds: list[np.ndarray], level: str = "all") -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }[level]
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [session.run(None, {name: x})[0] for x in feeds]


def first_node(path: Path, op_type: str) -> str:
    """The model's first node of ``op_type``, read from the file (the ground truth of localization)."""
    return next(n.name for n in onnx.load(str(path)).graph.node if n.op_type == op_type)


def reason_codes(result: dict[str, Any]) -> set[str]:
    return {r["code"] for r in result["reasons"]} | {r["code"] for o in result["outputs"] for r in o["reasons"]}


# --- a correct export passes, with its coverage printed -----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
@pytest.mark.parametrize("kind", ["cnn", "encoder"])
def test_a_correct_export_passes_against_pytorch_layer_by_layer(
    models: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    kind: str, exporter: str,
) -> None:  # fmt: skip
    ws = space(exported(kind, exporter), kind)
    worst = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(ort_outputs(ws.model, ws.name, ws.feeds), torch_outputs(models, kind, ws.feeds), strict=True)
    )
    assert worst < 1e-4  # ground truth: plain ORT and plain torch agree

    code, out = ws.reference(capsys, factory_of(kind), "--intermediates")
    assert code == 0, out
    assert f"{exporter} exporter" in out
    coverage = next(line for line in out.splitlines() if "ONNX tensors have a PyTorch counterpart" in line)
    mapped, total = (int(w) for w in coverage.split()[:3:2])
    assert 0 < mapped <= total
    code, result = ws.check(capsys)
    assert code == 0 and result["verdict"] == "pass", result["reasons"]
    assert result["outputs"][0]["metrics"]["max_abs_error"] == pytest.approx(worst, abs=1e-9)
    code, report = ws.localize(capsys)
    assert code == 0, report
    assert report["first_out_of_tolerance"] is None
    assert "torch reference" in report["comparison_detail"]


def test_coverage_per_exporter_names_sequential_children_and_folded_batchnorms(
    exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str]
) -> None:
    """Legacy: the folded BatchNorm takes over its Conv's tensor; dynamo names the folded node after the BatchNorm."""
    for exporter in ("legacy", "dynamo"):
        ws = space(exported("cnn", exporter), "cnn")
        code, out = ws.reference(capsys, factory_of("cnn"), "--intermediates", "--json")
        assert code == 0, out
        made = json.loads(out[out.index("{") :], parse_constant=lambda token: pytest.fail(f"bare {token}"))
        if exporter == "legacy":  # -o yaml (tests/test_cli_scripting.py leaves this command to this test)
            code, out = ws.reference(capsys, factory_of("cnn"), "--intermediates", "-o", "yaml")
            assert code == 0, out
            assert yaml.safe_load(out[out.index("baseline_id:") :])["coverage"] == made["coverage"]
        stem_conv = first_node(ws.model, "Conv")
        conv_output = next(n.output[0] for n in onnx.load(str(ws.model)).graph.node if n.name == stem_conv)
        assert made["exporter"] == exporter
        assert made["tensor_map"]["stem.1"] == conv_output  # the BatchNorm's output is the folded Conv's
        assert "stem.0" not in made["tensor_map"]  # the Conv's pre-BatchNorm value exists nowhere
        assert made["tensor_map"]["stem.2"] == made["tensor_map"]["stem"]  # a Sequential child, the last
        assert made["coverage"]["mapped"] == len(set(made["tensor_map"].values()))
        assert made["coverage_text"] == f"{made['coverage']['mapped']} of {made['coverage']['tensors']} ONNX tensors" \
            " have a PyTorch counterpart"  # fmt: skip
        for sub in ws.root.iterdir():  # the next exporter gets a fresh workspace
            if sub.is_dir():
                for path in sorted(sub.rglob("*"), reverse=True):
                    path.unlink() if path.is_file() else path.rmdir()
                sub.rmdir()


# --- train-mode exports -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_train_mode_legacy_cnn_export_fails_and_localizes_to_the_first_batchnorm(
    models: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str]
) -> None:
    ws = space(exported("cnn", "legacy", train=True), "cnn")
    pairs = zip(ort_outputs(ws.model, ws.name, ws.feeds), torch_outputs(models, "cnn", ws.feeds), strict=True)
    assert max(float(np.max(np.abs(a - b))) for a, b in pairs) > 0.01  # ground truth: ORT departs from torch
    assert ws.reference(capsys, factory_of("cnn"), "--intermediates")[0] == 0
    code, result = ws.check(capsys)
    assert code == 1 and "atol_rtol" in reason_codes(result)
    code, report = ws.localize(capsys)
    assert code == 1
    assert report["first_out_of_tolerance"]["name"] == first_node(ws.model, "BatchNormalization")
    assert report["first_changed"]["name"] == first_node(ws.model, "BatchNormalization")


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
def test_a_train_mode_encoder_export_fails_at_level_disable_and_localizes_to_the_first_dropout(
    exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str], exporter: str
) -> None:
    """ORT removes Dropout at level basic and above; at ``disable`` a training-mode Dropout drops, randomly."""
    path = exported("encoder", exporter, train=True)
    first_runs = ort_outputs(path, "embeddings", [np.ones((2, 12, 32), np.float32)] * 2, level="disable")
    assert not np.array_equal(first_runs[0], first_runs[1])  # ground truth: random at level disable
    ws = space(path, "encoder", level="disable")
    assert ws.reference(capsys, factory_of("encoder"), "--intermediates")[0] == 0
    code, result = ws.check(capsys)
    assert code == 1 and result["verdict"] == "fail"
    code, report = ws.localize(capsys)
    assert code == 1
    dropouts = [n for n in onnx.load(str(path)).graph.node if n.op_type == "Dropout" and len(n.input) == 3]
    assert report["first_out_of_tolerance"]["name"] == dropouts[0].name


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
def test_a_train_mode_encoder_whose_check_passes_is_not_out_of_tolerance_in_localize_either(
    exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str], exporter: str
) -> None:
    """At the production level ORT removes the Dropouts and the check passes; exposing their outputs keeps
    them, so localization falls to a level where they drop: that is information, not a failing node."""
    path = exported("encoder", exporter, train=True)
    ws = space(path, "encoder")  # level all, as production runs it
    assert ws.reference(capsys, factory_of("encoder"), "--intermediates")[0] == 0
    assert ws.check(capsys)[0] == 0
    code, report = ws.localize(capsys)
    assert code == 0, report
    assert report["first_out_of_tolerance"] is None
    below = [n for n in report["notes"] if "information" in n]
    assert below and "Dropout" in below[0], report["notes"]


@pytest.mark.slow
def test_the_dynamo_exporter_makes_an_eval_graph_of_a_train_mode_cnn_so_it_passes(
    exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str]
) -> None:
    path = exported("cnn", "dynamo", train=True)
    assert all(n.op_type != "BatchNormalization" for n in onnx.load(str(path)).graph.node)
    ws = space(path, "cnn")
    assert ws.reference(capsys, factory_of("cnn"))[0] == 0
    assert ws.check(capsys)[0] == 0


WRAPPER = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())

    def forward_features(self, x):
        return self.block(self.stem(x))


class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = Net()
        self.classifier = nn.Linear(8, 4)

    def forward(self, image):  # timm's idiom: the backbone's features, not its forward
        return self.classifier(self.net.forward_features(image).mean((2, 3)))


def make():
    torch.manual_seed(0)
    return Wrapper().eval()
"""


@pytest.mark.slow
def test_a_wrapper_calling_forward_features_maps_its_backbone_and_says_why(
    models: ModuleType, space: Callable[..., Space], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The legacy exporter scopes ``net.stem.0`` as ``stem.0`` when ``net`` itself is never called."""
    import torch

    factory = tmp_path / "wrapper.py"
    factory.write_text(WRAPPER, encoding="utf-8")
    namespace: dict[str, Any] = {}
    exec(WRAPPER, namespace)
    path = tmp_path / "wrapper.onnx"
    torch.onnx.export(namespace["make"](), (torch.zeros(2, 3, 32, 32),), str(path), dynamo=False,
                      input_names=["image"], dynamic_axes={"image": {0: "batch"}})  # fmt: skip
    assert any(n.name.startswith("/stem/") for n in onnx.load(str(path)).graph.node)  # ground truth: no "net"
    ws = space(path, "cnn")
    code, out = ws.reference(capsys, f"{factory}:make", "--intermediates")
    assert code == 0, out
    reference = json.loads(ws.reference(capsys, f"{factory}:make", "--intermediates", "--json")[1])
    assert {"net.stem.0", "net.block.0", "classifier"} <= set(reference["tensor_map"]), reference["tensor_map"]
    assert reference["coverage"]["mapped"] >= 5
    assert "forward_features" in out and "'net'" in out
    assert ws.check(capsys)[0] == 0


def test_a_factory_returning_a_training_module_is_refused_with_the_reason(
    models: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str]
) -> None:
    ws = space(exported("cnn", "legacy"), "cnn")
    factory = ws.root / "train_factory.py"
    factory.write_text("from models import make_cnn\n\ndef make_model():\n    return make_cnn().train()\n")
    (ws.root / "models.py").write_bytes(MODELS_PY.read_bytes())
    code, out = ws.reference(capsys, f"{factory}:make_model")
    assert code == 2
    assert "training mode" in out and "stem.1" in out and ".eval()" in out
    assert "((" not in out and "the model itself" in out  # named once, without doubled parentheses
    assert not (ws.root / "baselines" / "m").exists() or not any((ws.root / "baselines" / "m").iterdir())


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("nocolon.py", "expected FILE.py:FUNCTION"),
        ("{root}/missing.py:make_model", "not found"),
        ("{root}/models.py:no_such_function", "defines no function 'no_such_function'"),
        ("{root}/broken.py:make_model", "importing"),
        ("{root}/notmodule.py:make_model", "expected a torch.nn.Module"),
    ],
)
def test_a_bad_factory_is_a_usage_error_naming_what_was_expected(
    models: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    spec: str, expected: str,
) -> None:  # fmt: skip
    ws = space(exported("cnn", "legacy"), "cnn")
    (ws.root / "models.py").write_bytes(MODELS_PY.read_bytes())
    (ws.root / "broken.py").write_text("raise RuntimeError('boom')\n")
    (ws.root / "notmodule.py").write_text("def make_model():\n    return 42\n")
    code, out = ws.reference(capsys, spec.format(root=ws.root))
    assert code == 2 and expected in out, out


RAISES_ON_THIRD = """CALLS = []

def make_inputs(sample):
    CALLS.append(1)
    if len(CALLS) == 3:
        raise RuntimeError('camera unplugged')
    return sample['image']
"""
TWO_OUTPUTS = """import torch

class Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = make_model()

    def forward(self, x):
        y = self.inner(x)
        return y, y

def make_two():
    return Two().eval()
"""


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (RAISES_ON_THIRD, "make_inputs raised RuntimeError: camera unplugged"),
        ("def make_inputs(sample):\n    return 'not a tensor'\n", "make_inputs returned str"),
        (TWO_OUTPUTS, "the module returned 2 tensor(s), the ONNX model has 1 output(s)"),
    ],
    ids=["raises-on-sample-2", "not-a-tensor", "two-outputs"],
)
def test_a_factory_failing_mid_run_is_a_usage_error_and_leaves_no_baseline(
    models: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    body: str, expected: str,
) -> None:  # fmt: skip
    ws = space(exported("cnn", "legacy"), "cnn")
    (ws.root / "models.py").write_bytes(MODELS_PY.read_bytes())
    (ws.root / "factory.py").write_text(f"from models import make_cnn as make_model\n{body}")
    function = "make_two" if "make_two" in body else "make_model"
    code, out = ws.reference(capsys, f"{ws.root / 'factory.py'}:{function}")
    assert code == 2 and expected in out, out
    left = list((ws.root / "baselines" / "m").iterdir()) if (ws.root / "baselines" / "m").exists() else []
    assert left == []  # nothing half-written, nothing active


# --- the input check ----------------------------------------------------------------------------------

BGR = "import numpy as np\n\ndef make_inputs(sample):\n    return np.ascontiguousarray(sample['image'][:, ::-1])\n"
WRONG_MEAN_CNN = (
    "import numpy as np\nMEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)\n"
    "STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)\n\n"
    "def make_inputs(sample):  # un-normalize ImageNet-style, re-normalize with mean 0.5\n"
    "    return ((sample['image'] * STD + MEAN) - 0.5) / STD\n"
)
WRONG_MEAN_ENCODER = "def make_inputs(sample):\n    return sample['embeddings'] - 0.25\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "exporter", "preprocess", "described"),
    [
        ("cnn", "legacy", BGR, "channels [2, 1, 0] (axis 1) (BGR vs RGB)"),
        ("cnn", "dynamo", BGR, "(BGR vs RGB)"),
        ("cnn", "legacy", WRONG_MEAN_CNN, "a different mean, the same std"),
        ("encoder", "dynamo", WRONG_MEAN_ENCODER, "shift: PyTorch = benchset + -0.25 along axis 2"),
    ],
)
def test_preprocessing_mistakes_are_input_mismatch_with_their_description(
    models: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    kind: str, exporter: str, preprocess: str, described: str,
) -> None:  # fmt: skip
    ws = space(exported(kind, exporter), kind)
    (ws.root / "models.py").write_bytes(MODELS_PY.read_bytes())
    maker = "make_cnn" if kind == "cnn" else "make_encoder"
    (ws.root / "factory.py").write_text(f"from models import {maker} as make_model\n{preprocess}")
    code, out = ws.reference(capsys, f"{ws.root / 'factory.py'}:make_model")
    assert code == 1 and "input_mismatch" in out and described in out, out
    code, result = ws.check(capsys)
    assert code == 1
    details = [r["detail"] for r in result["reasons"] if r["code"] == "input_mismatch"]
    assert len(details) == 1 and described in details[0]


# --- an edited Resize, fp16 and int8 builds -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["legacy", "dynamo"])
def test_an_edited_resize_coordinate_mode_localizes_to_the_resize(
    exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str], tmp_path: Path, exporter: str
) -> None:
    edited = onnx.load(str(exported("cnn", exporter)))
    (resize,) = [n for n in edited.graph.node if n.op_type == "Resize"]
    for attribute in resize.attribute:
        if attribute.name == "coordinate_transformation_mode":
            attribute.s = b"align_corners"
    path = tmp_path / "edited.onnx"
    onnx.save(edited, str(path))
    ws = space(path, "cnn")
    assert ws.reference(capsys, factory_of("cnn"), "--intermediates")[0] == 0
    assert ws.check(capsys)[0] == 1
    code, report = ws.localize(capsys)
    assert code == 1
    assert report["first_out_of_tolerance"]["name"] == resize.name
    assert report["first_changed"]["name"] == resize.name


@pytest.mark.slow
@pytest.mark.parametrize("build", ["fp16", "int8"])
def test_fp16_and_int8_builds_are_compared_with_pytorch_and_their_worst_layers_reported(
    models: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    tmp_path: Path, build: str,
) -> None:  # fmt: skip
    source = exported("cnn", "legacy")
    path = tmp_path / f"cnn_{build}.onnx"
    rng = np.random.default_rng(3)
    if build == "fp16":
        from onnxconverter_common import float16

        onnx.save(float16.convert_float_to_float16(onnx.load(str(source)), keep_io_types=True), str(path))
    else:
        from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

        class Reader(CalibrationDataReader):  # type: ignore[misc]
            def __init__(self) -> None:
                self.items = iter([{"image": rng.uniform(-2, 2, (2, 3, 32, 32)).astype(np.float32)} for _ in range(4)])

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self.items, None)

        quantize_static(str(source), str(path), Reader(), weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
    ws = space(path, "cnn")
    truth = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(ort_outputs(path, "image", ws.feeds), torch_outputs(models, "cnn", ws.feeds), strict=True)
    )
    code, out = ws.reference(capsys, factory_of("cnn"), "--intermediates")
    assert code == 0, out
    code, result = ws.check(capsys)
    assert code in (0, 1)
    assert result["outputs"][0]["metrics"]["max_abs_error"] == pytest.approx(truth, rel=1e-6, abs=1e-9)
    code, report = ws.localize(capsys)
    assert code in (0, 1), report
    names = {n.name for n in onnx.load(str(path)).graph.node}
    assert report["top"] and all(node["name"] in names for node in report["top"])
    assert report["top"][0]["rel_error"] == max(node["rel_error"] for node in report["profile"])
    assert report["top"][0]["rel_error"] > 0


# --- onnxmon works without torch ----------------------------------------------------------------------


@pytest.mark.database
@pytest.mark.process
def test_onnxmon_and_its_torchref_package_import_without_loading_torch() -> None:
    code = (
        "import sys; import monitor.torchref, monitor.cli, monitor.check; monitor.cli._register();"
        " assert 'torch' not in sys.modules, 'torch was imported'; print('ok')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


# --- hostile factories: sys.exit, a hang ---------------------------------------------------------------

EXITS_ON_IMPORT = "import sys\nsys.exit(0)\n"
EXITS_IN_FACTORY = "import sys\n\ndef make_model():\n    sys.exit(0)\n"
EXITS_IN_INPUTS = "from models import make_cnn as make_model\n\ndef make_inputs(sample):\n    raise SystemExit(0)\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (EXITS_ON_IMPORT, "raised SystemExit"),
        (EXITS_IN_FACTORY, "make_model() raised SystemExit"),
        (EXITS_IN_INPUTS, "make_inputs raised SystemExit"),
    ],
    ids=["on-import", "in-factory", "in-make-inputs"],
)
def test_a_factory_calling_sys_exit_is_a_usage_error_not_a_silent_success(
    models: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str],
    body: str, expected: str,
) -> None:  # fmt: skip
    ws = space(exported("cnn", "legacy"), "cnn")
    (ws.root / "models.py").write_bytes(MODELS_PY.read_bytes())
    (ws.root / "factory.py").write_text(body)
    code, out = ws.reference(capsys, f"{ws.root / 'factory.py'}:make_model")
    assert code == 2 and expected in out, out
    assert not (ws.root / "baselines" / "m").exists() or not any((ws.root / "baselines" / "m").iterdir())


HANGS_IN_INPUTS = (
    "import time\nfrom models import make_cnn as make_model\n\n"
    "def make_inputs(sample):\n    while True:\n        try:\n            time.sleep(1)\n"
    "        except Exception:\n            pass\n"
)


def test_a_hung_factory_is_cut_at_the_timeout_could_not_measure_and_leaves_no_baseline(
    models: ModuleType, exported: Export, space: Callable[..., Space], capsys: pytest.CaptureFixture[str]
) -> None:
    ws = space(exported("cnn", "legacy"), "cnn")
    (ws.root / "models.py").write_bytes(MODELS_PY.read_bytes())
    (ws.root / "factory.py").write_text(HANGS_IN_INPUTS)
    code, out = ws.reference(capsys, f"{ws.root / 'factory.py'}:make_model", "--timeout", "3")
    assert code == 3 and "did not finish within 3 s (--timeout)" in out, out
    assert not (ws.root / "baselines" / "m").exists() or not any((ws.root / "baselines" / "m").iterdir())
