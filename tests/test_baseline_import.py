"""``onnxmon baseline import``: Polygraphy run results, intermediates, and outputs checked against the model.

The Polygraphy files are written by the real ``polygraphy run`` (skipped where polygraphy is not
installed, mandatory with ``ONNXMON_REQUIRE=polygraphy``); the numbers they hold come from ONNX
Runtime itself, so an imported baseline must pass a check bit for bit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from monitor.files import baselines
from tests.conftest import onnxmon, unavailable
from tests.workspace import Workspace

CNN = Path(__file__).resolve().parent / "corpus" / "torch" / "cnn_legacy.onnx"


def polygraphy() -> str:
    found = shutil.which("polygraphy", path=str(Path(sys.executable).parent))
    if found is None:
        unavailable("polygraphy", "polygraphy is not installed (pip install polygraphy)")
        raise AssertionError("unreachable")
    return found


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    ws = Workspace(tmp_path)
    ws.add_model("cnn", onnx.load(str(CNN)), count=2, dims={"batch": 1})
    ws.benchsets["cnn"] = {"name": "cnn-bench", "polygraphy_json": "inputs.json"}
    return ws


def polygraphy_run(ws: Workspace, *extra: str) -> Path:
    """Two iterations of real inputs and outputs written by ``polygraphy run --onnxrt``."""
    model = ws.root / "models" / "cnn.onnx"
    outputs = ws.root / "outputs.json"
    subprocess.run(
        [polygraphy(), "run", str(model), "--onnxrt", "--iterations", "2", "--input-shapes", "image:[1,3,32,32]",
         "--save-inputs", str(ws.root / "inputs.json"), "--save-outputs", str(outputs), *extra],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return outputs


@pytest.mark.process
@pytest.mark.server
def test_polygraphy_run_results_import_as_a_baseline_that_checks_clean(ws: Workspace) -> None:
    outputs = polygraphy_run(ws)
    config = str(ws.write())
    code, out, err = onnxmon("baseline", "import", "cnn", str(outputs), "--kind", "polygraphy-json", "-c", config)
    assert code == 0, err
    assert "(2 samples" in out
    raw = json.loads(outputs.read_text())
    assert raw["polygraphy_class"] == "RunResults"  # the real format, not our guess of it
    code, out, err = onnxmon("check", "cnn", "-c", config, "--json", "--no-store")
    assert code == 0, out
    assert json.loads(out)[0]["outputs"][0]["metrics"]["max_abs_error"] == 0.0


@pytest.mark.process
def test_polygraphy_outputs_with_every_tensor_marked_keep_the_intermediates(ws: Workspace) -> None:
    outputs = polygraphy_run(ws, "--onnx-outputs", "mark", "all")
    config = str(ws.write())
    assert onnxmon("baseline", "import", "cnn", str(outputs), "--kind", "polygraphy-json", "-c", config)[0] == 0
    baseline = baselines.active(ws.root / "baselines", "cnn")
    assert baseline is not None
    stored = baseline.intermediates(1)
    model = onnx.load(str(CNN))
    assert set(stored) <= {o for n in model.graph.node for o in n.output}
    assert len(stored) > 10


def test_npz_intermediates_are_stored_and_unknown_names_refused(ws: Workspace, tmp_path: Path) -> None:
    ws.benchsets["cnn"] = {
        "name": "cnn-bench",
        "generate": {"model": "models/cnn.onnx", "count": 2, "dims": {"batch": 1}},
    }
    config = str(ws.write())
    import onnxruntime as ort

    sess = ort.InferenceSession(str(CNN), providers=["CPUExecutionProvider"])
    from monitor.files import benchsets

    bench = benchsets.materialize(ws.settings().benchset("cnn-bench"), ws.root / "benchsets")
    files = []
    for i in range(2):
        np.savez(tmp_path / f"out{i}.npz", probs=sess.run(None, bench.load_sample(i))[0])
        files.append(str(tmp_path / f"out{i}.npz"))
    first_conv = next(n.output[0] for n in onnx.load(str(CNN)).graph.node if n.op_type == "Conv")
    np.savez(tmp_path / "inter0.npz", **{first_conv: np.zeros(3, np.float32)})
    code, _, err = onnxmon(
        "baseline", "import", "cnn", *files, "--intermediates", str(tmp_path / "inter0.npz"), "-c", config
    )
    assert code == 0, err
    stored = baselines.active(ws.root / "baselines", "cnn")
    assert stored is not None and list(stored.intermediates(0)) == [first_conv]
    np.savez(tmp_path / "bad.npz", **{"stem.0.weight": np.zeros(3, np.float32)})
    code, _, err = onnxmon(
        "baseline", "import", "cnn", *files, "--intermediates", str(tmp_path / "bad.npz"), "-c", config
    )
    assert code == 2 and "['stem.0.weight'] are not tensors of cnn.onnx" in err


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "cannot be read"),
        ('{"lst": 3}', "expected {'polygraphy_class': 'RunResults'"),
        (
            '{"polygraphy_class": "RunResults", "lst": [["a", []], ["b", []]]}',
            "holds the results of 2 runners ['a', 'b']",
        ),
        (
            '{"polygraphy_class": "RunResults", "lst": [["a", [{"outputs": {"probs": 1}}]]]}',
            "expected an encoded ndarray",
        ),
    ],
)
def test_bad_polygraphy_files_exit_2_naming_the_file(
    ws: Workspace, tmp_path: Path, content: str, expected: str
) -> None:
    ws.benchsets["cnn"] = {
        "name": "cnn-bench",
        "generate": {"model": "models/cnn.onnx", "count": 1, "dims": {"batch": 1}},
    }
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, _, err = onnxmon("baseline", "import", "cnn", str(bad), "--kind", "polygraphy-json", "-c", str(ws.write()))
    assert code == 2
    assert "bad.json" in err and expected in err
