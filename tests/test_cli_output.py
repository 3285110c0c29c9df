"""One output path for every command: ``-o yaml`` is YAML, ``-o json`` the same data, a piped table is TSV.

The commands are enumerated from the CLI's own command tree (``tree.walk``), so a command added
later is run here too or the test names it. Each runs the real command tree in this process (typer's
runner: stdout is not a terminal, as in a pipe) against a workspace with ONNX models, a baseline
captured by ONNX Runtime and a SQLite store; the commands whose piped tables were box-drawn
(``localize``, ``sqnr``) and ``check`` also run as the installed ``onnxmon`` with stdout a real pipe.
Three processes per command made this module take ~10 minutes; in-process it takes a fraction.
``-o yaml`` must parse with ``yaml.safe_load`` and must *not* parse with ``json.loads``: JSON is
valid YAML, so a command that printed JSON for ``-o yaml`` would pass a YAML-only check.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests import conftest, inprocess, modelzoo
from tests.test_cli_scripting import ARGS, NOT_PRINTING, RUN_ELSEWHERE, Setup, as_run, fill, leaves, strict
from tests.workspace import Workspace

ONNXMON = str(Path(sys.executable).parent / "onnxmon")
TIMEOUT_S = 600

# Where this module runs a command otherwise than tests/test_cli_scripting.py's ARGS: sqnr of the
# classifier has no QDQ layer and prints nothing (exit 3); here it gets a quantized model.
OVERRIDES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("sqnr",): ("qdq", "--float", "{float_model}", "-c", "{config}"),
    ("coverage",): ("qdq", "-c", "{config}"),
}

# The header of each command's table (its TSV first line, or for `check` the line the table starts at).
# Commands not listed print a sentence or a report, never a table; every command's piped stdout is
# checked for box drawing.
TABLES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("baseline", "history"): ("", "id", "source", "created", "active from", "active until", "environment"),
    ("baseline", "list"): ("", "id", "created", "source", "samples", "model sha256", "environment"),
    ("benchset", "list"): ("name", "version", "samples", "source", "created", "sha256"),
    ("calibrate",): ("method", "SQNR dB", "worst layer dB", "flipped", "decisions", "size", "error"),
    ("check",): ("model", "output", "verdict"),
    ("coverage",): ("tensor", "clipped", "codes used", "seen min", "seen max", "range min", "range max"),
    ("history",): ("when (UTC)", "run"),
    ("incident", "list"): ("id", "at", "model", "run", "cause", "fix", "text"),
    ("localize",): ("#", "node", "op", "rel error", "max abs", "changed", "out of tol", "inputs changed"),
    ("sqnr",): ("#", "node", "op", "tensor", "paired with", "SQNR dB"),
}

# Commands whose data differs from one run to the next (new ids, timestamps, timings, load):
# their -o json and -o yaml runs are compared by shape (the same keys and list lengths), the rest by value.
VARIES = {
    ("add",),  # each run captures a new baseline (--replace): new ids and times
    ("baseline", "capture"),
    ("calibrate",),  # quantize_seconds
    ("baseline", "import"),
    ("benchset", "import"),  # the first run makes the set ("created"), the next finds it ("unchanged")
    ("check",),
    ("diagnose",),
    ("env", "show"),
    ("incident", "note"),
    ("localize",),
    ("rehearse",),
}

BOX_DRAWING = re.compile("[\u2500-\u257f]")


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def onnxmon(*argv: str) -> Ran:
    """``onnxmon ARGV`` in its own process, stdout and stderr pipes (so not a terminal)."""
    done = subprocess.run(
        [ONNXMON, *argv], capture_output=True, text=True, timeout=TIMEOUT_S, check=False, stdin=subprocess.DEVNULL
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def in_process(*argv: str) -> Ran:
    """``onnxmon ARGV`` through the CLI's own command tree in this process (stdout not a terminal)."""
    result = conftest.onnxmon(*argv)
    return Ran(result.exit_code, result.stdout, result.stderr)


# Run also as a separate process with stdout a real pipe: the tables that were box-drawn there.
AS_A_PROCESS = {("check",), ("localize",), ("sqnr",)}


def quantized(float_path: Path, qdq_path: Path) -> None:
    """``float_path`` quantized to int8 QDQ by ONNX Runtime's own quantizer."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            rng = np.random.default_rng(3)
            self._batches = iter([{"x": rng.normal(0, 1, (2, 16)).astype(np.float32)} for _ in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._batches, None)

    quantize_static(str(float_path), str(qdq_path), Reader(), quant_format=QuantFormat.QDQ)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    """Model ``clf`` with a baseline captured, promoted and checked (in this process), an incident noted on that
    run; model ``qdq``, an int8 QDQ build of ``models/float.onnx``."""
    ws = Workspace(tmp_path_factory.mktemp("ws"))
    ws.add_model("clf", modelzoo.classifier())
    float_path = modelzoo.save(modelzoo.deep_mlp(layers=4), ws.root / "models" / "float.onnx")
    ws.add_model("qdq", modelzoo.deep_mlp(layers=4))
    quantized(float_path, ws.root / "models" / "qdq.onnx")
    config = str(ws.write())
    made = inprocess.capture_and_check(ws, "clf")
    noted = in_process("incident", "note", str(made.run_id), "--cause", "unknown", "--text", "t", "-c", config)
    assert noted.returncode == 0, noted.stderr
    return Setup(ws, made.baseline_id, str(made.result.environment_fingerprint))


def printing() -> list[tuple[str, ...]]:
    """Every leaf command of the CLI's tree but the daemon."""
    return sorted(path for path, _ in leaves() if path not in NOT_PRINTING)


def arguments(setup: Setup, path: tuple[str, ...], tmp: Path) -> list[str]:
    args = OVERRIDES.get(path, ARGS[path])
    ours = {"{float_model}": str(setup.ws.root / "models" / "float.onnx")}
    return fill(setup, tuple(ours.get(a, a) for a in args), tmp)


def skeleton(value: Any) -> Any:
    """The shape of a JSON value: its keys and list lengths, every scalar replaced by its kind."""
    if isinstance(value, dict):
        return {k: skeleton(v) for k, v in value.items()}
    if isinstance(value, list):
        return [skeleton(v) for v in value]
    return "number" if isinstance(value, int | float) and not isinstance(value, bool) else type(value).__name__


def steady(value: Any) -> Any:
    """``value`` without the environment differences in volatile fields (``host.load1`` moves between two
    runs or does not): a check's ``details.env_diff`` lists them, so its length is not the same run to run."""
    if isinstance(value, dict):
        return {
            k: [d for d in v if not (isinstance(d, dict) and d.get("stable") is False)]
            if k == "env_diff" and isinstance(v, list)
            else steady(v)
            for k, v in value.items()
        }
    return [steady(v) for v in value] if isinstance(value, list) else value


def shape_differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two skeletons differ, as paths (``outputs[0].metrics.snr_db: str != number``): what a failure names."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = [f"{where}.{k}: only in -o yaml" for k in a.keys() - b.keys()]
        found += [f"{where}.{k}: only in -o json" for k in b.keys() - a.keys()]
        return found + [d for k in a.keys() & b.keys() for d in shape_differences(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items in -o yaml, {len(b)} in -o json"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in shape_differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a} in -o yaml, {b} in -o json"]


def test_every_printing_command_is_run_here() -> None:
    missing = [" ".join(p) for p in printing() if p not in ARGS and p not in RUN_ELSEWHERE and p not in OVERRIDES]
    assert not missing, "add these to tests/test_cli_scripting.py ARGS: " + ", ".join(missing)
    commands = set(printing())
    assert commands.issuperset(TABLES) and commands.issuperset(VARIES), "a command named here is gone"


@pytest.mark.parametrize(
    ("path", "run"),
    [as_run(p, in_process) for p in printing()]
    + [pytest.param(p, onnxmon, marks=pytest.mark.process) for p in sorted(AS_A_PROCESS)],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else v.__name__,
)
def test_yaml_is_yaml_json_is_the_same_data_and_a_piped_table_is_tab_separated(
    setup: Setup, path: tuple[str, ...], run: Callable[..., Ran], tmp_path: Path
) -> None:
    if path in RUN_ELSEWHERE:
        pytest.skip(RUN_ELSEWHERE[path])
    args = arguments(setup, path, tmp_path)
    as_yaml, as_json, table = (run(*path, *args, *fmt) for fmt in (("-o", "yaml"), ("-o", "json"), ()))
    for ran in (as_yaml, as_json, table):
        assert ran.returncode in (0, 1), f"onnxmon {' '.join(path)}: exit {ran.returncode}\n{ran.stderr}"
    assert as_yaml.returncode == as_json.returncode == table.returncode, (as_yaml.stderr, as_json.stderr)

    assert as_yaml.stdout.strip(), f"-o yaml printed nothing\n{as_yaml.stderr}"
    data = yaml.safe_load(as_yaml.stdout)
    with pytest.raises(json.JSONDecodeError):
        json.loads(as_yaml.stdout)  # YAML block style: a command printing JSON for -o yaml fails here
    same = strict(as_json.stdout)
    if path in VARIES:
        found = shape_differences(skeleton(steady(data)), skeleton(steady(same)))
        assert not found, found
    else:
        assert data == same

    assert not BOX_DRAWING.search(table.stdout), f"box drawing in a pipe:\n{table.stdout}"
    header = TABLES.get(path)
    if header is None:
        return
    lines = table.stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if tuple(line.split("\t")[: len(header)]) == header]
    assert starts, f"no tab-separated header {header} in:\n{table.stdout}"
    columns = len(lines[starts[0]].split("\t"))
    rows = [line for line in lines[starts[0] + 1 :] if "\t" in line]
    assert rows, f"a header without rows:\n{table.stdout}"
    assert all(len(row.split("\t")) == columns for row in rows), table.stdout
