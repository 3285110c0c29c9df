"""Lint and batch invariance on models exported by a real torch (both exporters).

Skipped without torch, mandatory where ``ONNXMON_REQUIRE`` names ``torch`` (``tests/conftest.py``).
Each scenario is what a user does by mistake: export in ``train()`` mode, ``x.view(1, -1)`` with a
dynamic batch axis, a Resize edited after export. The correct export must lint clean.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path
from typing import Any

import onnx
import pytest

from monitor import cli
from monitor.lint import lint_model
from tests.conftest import need_torch
from tests.workspace import Workspace

pytestmark = pytest.mark.torch  # torch's tests start processes once torch is there (tests/tiers.py)

try:
    import torch
    from torch import nn
    from torch.nn import functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def _torch() -> None:
    need_torch()  # both exporters: the dynamo one needs onnxscript


def make_net(baked: bool) -> Any:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.drop = nn.Dropout(0.3)
            self.head = nn.Linear(4 * 4 * 4, 5)

        def forward(self, x: Any) -> Any:
            y = self.drop(F.relu(self.bn(self.conv(x))))
            y = F.interpolate(y, scale_factor=2.0, mode="nearest")
            y = F.avg_pool2d(y, 4)
            return self.head(y.reshape(1, -1) if baked else y.flatten(1))

    torch.manual_seed(0)
    return Net()


def export(net: Any, path: Path, *, dynamo: bool, train: bool) -> Path:
    net.train(train)
    x = torch.randn(1, 3, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            batch = torch.export.Dim("batch", min=1, max=64)
            torch.onnx.export(net, (x,), str(path), dynamo=True, input_names=["x"], dynamic_shapes={"x": {0: batch}})
        else:
            mode = torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.EVAL
            torch.onnx.export(
                net, (x,), str(path), dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "batch"}}, training=mode
            )
    return path


def codes(path: Path) -> set[tuple[str, str]]:
    return {(h.code, h.op_type) for h in lint_model(path).hazards}


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_correct_export_lints_clean(tmp_path: Path, dynamo: bool) -> None:
    assert codes(export(make_net(baked=False), tmp_path / "m.onnx", dynamo=dynamo, train=False)) == set()


def test_a_legacy_train_mode_export_names_the_batchnorm_and_the_dropout(tmp_path: Path) -> None:
    path = export(make_net(baked=False), tmp_path / "m.onnx", dynamo=False, train=True)
    report = lint_model(path)
    assert {(h.code, h.node) for h in report.errors} == {
        ("batchnorm_training", "/bn/BatchNormalization"),
        ("dropout_training", "/drop/Dropout"),
    }


def test_a_dynamo_train_mode_export_names_the_dropout(tmp_path: Path) -> None:
    path = export(make_net(baked=False), tmp_path / "m.onnx", dynamo=True, train=True)
    dropouts = [n for n in onnx.load(str(path)).graph.node if n.op_type == "Dropout"]
    assert dropouts  # ground truth: the exporter kept the Dropout, with its training_mode input
    assert ("dropout_training", "Dropout") in codes(path)


def test_a_baked_batch_is_found_by_lint_and_by_batch_invariance(tmp_path: Path) -> None:
    path = export(make_net(baked=True), tmp_path / "baked.onnx", dynamo=False, train=False)
    assert codes(path) == {("baked_batch", "Reshape")}
    ws = Workspace(tmp_path)
    ws.add_model("baked", onnx.load(str(path)), count=8, dims={"batch": 1})
    ws.set("baked", checks={"batch_invariance": {"batch": 8}})
    config = str(ws.write())
    assert cli.main(["baseline", "capture", "baked", "-c", config, "--quiet"]) == 0
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli.main(["check", "baked", "-c", config, "--json", "--no-store"])
    [result] = json.loads(buffer.getvalue())
    assert code == 1
    [reason] = [r for r in result["reasons"] if r["code"] == "batch_variant"]
    assert "baked_batch at /Reshape" in reason["detail"]


def test_an_edited_resize_mode_is_named(tmp_path: Path) -> None:
    path = export(make_net(baked=False), tmp_path / "m.onnx", dynamo=False, train=False)
    model = onnx.load(str(path))
    [resize] = [n for n in model.graph.node if n.op_type == "Resize"]
    for attr in resize.attribute:
        if attr.name == "coordinate_transformation_mode":
            attr.s = b"half_pixel"
    onnx.save(model, str(tmp_path / "edited.onnx"))
    assert [(h.code, h.node) for h in lint_model(tmp_path / "edited.onnx").hazards] == [("resize_mode", resize.name)]


def test_a_dynamo_train_mode_export_of_an_inplace_dropout_written_as_random_ops_is_named(tmp_path: Path) -> None:
    """``nn.Dropout(inplace=True)`` (torchvision's classifiers) exports as ``aten.bernoulli.p``, no Dropout op."""

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.drop = nn.Dropout(0.2, inplace=True)
            self.out = nn.Linear(8, 4)

        def forward(self, x: Any) -> Any:
            return self.out(self.drop(F.relu(self.fc(x))))

    torch.manual_seed(0)
    net = Head().train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.zeros(2, 8),), str(tmp_path / "m.onnx"), dynamo=True, input_names=["x"])
    ops = [n.op_type for n in onnx.load(str(tmp_path / "m.onnx")).graph.node]
    assert "Dropout" not in ops and "RandomUniformLike" in ops  # ground truth: the mask is made of ops
    [found] = [h for h in lint_model(tmp_path / "m.onnx").errors if h.code == "dropout_training"]
    assert found.op_type == "RandomUniformLike" and "'drop'" in found.detail
