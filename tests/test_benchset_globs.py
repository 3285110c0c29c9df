"""Benchmark-set declarations: npz globs, and models naming a set made by ``benchset import``.

Everything through the public CLI on real files; ground truth (the samples' contents and order)
comes from numpy reading the same npz files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from monitor.files import benchsets
from tests.conftest import onnxmon
from tests.workspace import Workspace


def relu_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def write_samples(folder: Path, names: list[str]) -> dict[str, np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for i, name in enumerate(names):
        arrays[name] = np.full((1, 3), i - 1.5, np.float32)
        np.savez(folder / name, x=arrays[name])
    return arrays


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    ws = Workspace(tmp_path)
    ws.add_model("relu", relu_model())
    return ws


@pytest.mark.parametrize("declared", ["data/*.npz", ["data/b*.npz", "data/a.npz"]], ids=["string", "list"])
def test_an_npz_glob_takes_every_matching_file_sorted_by_name(ws: Workspace, declared: Any) -> None:
    arrays = write_samples(ws.root / "data", ["b2.npz", "a.npz", "b1.npz"])
    ws.benchsets["relu"] = {"name": "relu-bench", "npz": declared}
    code, _, err = onnxmon("benchset", "create", "relu-bench", "-c", str(ws.write()))
    assert code == 0, err
    bench = benchsets.open_benchset(ws.root / "benchsets", "relu-bench")
    expected = ["a.npz", "b1.npz", "b2.npz"] if isinstance(declared, str) else ["b1.npz", "b2.npz", "a.npz"]
    assert list(bench.labels) == expected
    for index, name in enumerate(expected):
        np.testing.assert_array_equal(bench.load_sample(index)["x"], arrays[name])


def test_a_new_file_matching_the_glob_makes_a_new_version(ws: Workspace) -> None:
    write_samples(ws.root / "data", ["a.npz"])
    ws.benchsets["relu"] = {"name": "relu-bench", "npz": "data/*.npz"}
    config = str(ws.write())
    assert onnxmon("benchset", "create", "relu-bench", "-c", config)[0] == 0
    write_samples(ws.root / "data", ["a.npz", "b.npz"])
    code, out, _ = onnxmon("benchset", "create", "relu-bench", "-c", config)
    assert code == 0 and "v2 (created): 2 sample(s)" in out


def test_a_glob_that_matches_nothing_is_a_clear_error(ws: Workspace) -> None:
    ws.benchsets["relu"] = {"name": "relu-bench", "npz": "data/*.npz"}
    code, _, err = onnxmon("benchset", "create", "relu-bench", "-c", str(ws.write()))
    assert code == 2
    assert "npz pattern" in err and "data/*.npz matches no file" in err


@pytest.mark.process
def test_a_model_may_name_a_set_made_by_benchset_import(ws: Workspace, tmp_path: Path) -> None:
    write_samples(tmp_path / "incoming", ["s0.npz", "s1.npz"])
    del ws.benchsets["relu"]
    ws.set("relu", benchset="shared")
    config = ws.write()
    code, _, err = onnxmon("config", "validate", "-c", str(config))
    assert code == 2 and "which is not declared" in err and "onnxmon benchset import shared" in err
    files = [str(tmp_path / "incoming" / n) for n in ("s0.npz", "s1.npz")]
    assert onnxmon("benchset", "import", "shared", *files, "--root", str(ws.root / "benchsets"))[0] == 0
    assert onnxmon("config", "validate", "-c", str(config))[0] == 0
    assert onnxmon("baseline", "capture", "relu", "-c", str(config), "--quiet")[0] == 0
    code, out, _ = onnxmon("check", "relu", "-c", str(config), "--json", "--no-store")
    [result] = json.loads(out)
    assert code == 0 and result["benchset"] == "shared" and result["sample_count"] == 2


def test_a_declared_imported_set_is_used_as_it_is(ws: Workspace, tmp_path: Path) -> None:
    write_samples(tmp_path / "incoming", ["s0.npz"])
    assert (
        onnxmon(
            "benchset", "import", "mine", str(tmp_path / "incoming" / "s0.npz"), "--root", str(ws.root / "benchsets")
        )[0]
        == 0
    )
    ws.benchsets["relu"] = {"name": "mine", "imported": True}
    ws.set("relu", benchset="mine")
    code, out, _ = onnxmon("benchset", "create", "mine", "-c", str(ws.write()))
    assert code == 0 and "mine v1 (unchanged): 1 sample(s)" in out
