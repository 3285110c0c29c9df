"""``onnxmon calibrate`` on corpus models: each calibration method's SQNR, flipped decisions and size.

Each model is calibrated on a seeded set of its own (seed 1, deterministic: the corpus ships no
calibration inputs) and measured on its benchmark set (seed 0). For every method measured, the
quantized file it kept (``--keep``) is run by plain ONNX Runtime beside the float model, and the
decisions (argmax per row), the end-to-end SQNR and the file size are computed in numpy: the command's
figures must equal them, and its recommendation must be the one its stated rule picks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.files import benchsets
from tests.conftest import Ran
from tests.realmodels import MODELS, Prepared, prepare, session

pytestmark = pytest.mark.realmodels

ARGMAX: dict[str, Any] = {"kind": "argmax", "axis": -1}
DECIDED: dict[str, dict[str, dict[str, Any]]] = {
    "torch-cnn-legacy": {"probs": ARGMAX},
    "torch-cnn-dynamo": {"probs": ARGMAX},
    "vietcombank-captcha": {f"digit_{i}": ARGMAX for i in range(5)},
}


@pytest.fixture(scope="module")
def prepared() -> Iterator[dict[str, Prepared]]:
    yield {}


def _numpy(float_model: Path, built: Path, samples: list[dict[str, np.ndarray]], outputs: list[str]) -> dict[str, Any]:
    """Flipped argmax decisions, their total and the end-to-end SQNR (dB), from two plain ORT sessions."""
    before, after = session(float_model), session(built)
    names = [o.name for o in before.get_outputs()]
    flipped = total = 0
    signal = noise = 0.0
    for feeds in samples:
        theirs = dict(zip(names, before.run(names, feeds), strict=True))
        ours = dict(zip(names, after.run(names, feeds), strict=True))
        for name in outputs:
            a, b = np.argmax(ours[name], axis=-1).ravel(), np.argmax(theirs[name], axis=-1).ravel()
            flipped += int((a != b).sum())
            total += a.size
        for name, value in theirs.items():
            if value.dtype.kind == "f":
                ref = value.astype(np.float64)
                signal += float((ref**2).sum())
                noise += float(((ref - ours[name].astype(np.float64)) ** 2).sum())
    return {"flipped": flipped, "total": total, "sqnr_db": 10 * math.log10(signal / noise)}


@pytest.mark.parametrize("name", sorted(DECIDED))
def test_calibrate_reports_each_method_as_plain_ort_and_numpy_measure_it(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory, run_cli: Callable[..., Ran]
) -> None:
    item = prepare(prepared, name, tmp_path_factory)
    item.ws.models[name]["decisions"] = DECIDED[name]
    relative = item.path.relative_to(item.ws.root)
    item.ws.benchsets["calibration"] = {
        "name": f"{name}-calibration",
        "generate": {"model": str(relative), "count": 4, "seed": 1, **MODELS[name].generate},
    }
    plan = item.plan()
    benchsets.ensure(plan.benchset, plan.benchsets_dir)
    keep = item.ws.root / "builds"
    ran = run_cli(
        "calibrate", name, "--data", f"{name}-calibration", "--keep", keep, "-c", item.ws.write(), "-o", "json"
    )
    assert ran.exit_code == 0, ran.output
    data = json.loads(ran.stdout)
    measured = [m for m in data["methods"] if m["error"] is None]
    assert len(measured) >= 2, data["methods"]
    for method in measured:
        built = Path(method["path"])
        truth = _numpy(item.pristine, built, item.samples(), sorted(DECIDED[name]))
        assert (method["decisions_flipped"], method["decisions_total"]) == (truth["flipped"], truth["total"])
        assert math.isfinite(method["sqnr_db"]) and method["sqnr_db"] == pytest.approx(truth["sqnr_db"], rel=1e-9)
        assert method["size_bytes"] == built.stat().st_size
        assert method["layers"] and all(isinstance(layer["sqnr_db"], float) for layer in method["layers"])
    best = min(measured, key=lambda m: (m["decisions_flipped"], -m["sqnr_db"], m["size_bytes"]))
    assert data["recommended"] == best["method"] and "fewest decisions flipped" in data["rule"]
    table = run_cli("calibrate", name, "--data", f"{name}-calibration", "--method", "MinMax", "-c", item.ws.config_file)
    assert table.exit_code == 0 and "recommended: MinMax" in table.stdout, table.output
