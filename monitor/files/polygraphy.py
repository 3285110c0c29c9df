"""Polygraphy's JSON files, read without importing polygraphy: saved inputs and saved run results.

``polygraphy run --save-inputs in.json`` writes a JSON list of ``{input name: array}``;
``--save-outputs out.json`` writes a ``RunResults``::

    {"polygraphy_class": "RunResults",
     "lst": [[runner_name, [IterationResult, ...]], ...]}
    IterationResult = {"polygraphy_class": "IterationResult", "runner_name": ..., "runtime": ...,
                       "outputs": {tensor name: array or {"polygraphy_class": "LazyArray", "values": array}}}

An array is ``{"array": base64(np.save bytes), "polygraphy_class": "ndarray"}`` (older files: the
``__polygraphy_encoded_ndarray`` key, latin-1 text instead of base64, or a one-array npz inside).
One iteration is one sample. ``--onnx-outputs mark all`` adds every intermediate tensor to the
outputs: the caller splits model outputs from intermediates by name.
"""

from __future__ import annotations

import base64
import binascii
import io
from pathlib import Path
from typing import Any

import numpy as np

from monitor import bounded, jsonsafe
from monitor.errors import BenchsetError, MonitorError
from monitor.files.tensors import load_npy_bytes, load_npz

Sample = dict[str, np.ndarray[Any, Any]]


# The whole file is decoded at once (base64 arrays inside JSON): past this, import the data as .npz instead.
MAX_JSON_BYTES = 512 << 20


def _read_json(path: Path, what: str, error: type[MonitorError]) -> Any:
    try:
        return jsonsafe.loads(bounded.read_text(path, limit=MAX_JSON_BYTES))  # its numbers bounded
    except FileNotFoundError:
        raise error(f"{what} {path} not found") from None
    except bounded.FileRefused as exc:
        raise error(f"{what} {path} cannot be read: {exc.strerror}") from None
    except (OSError, ValueError) as exc:  # not UTF-8, not JSON, or a number out of range
        raise error(f"{what} {path} cannot be read: {exc}") from None
    except RecursionError:
        raise error(f"{what} {path} is nested too deeply to be a Polygraphy file") from None


def read_polygraphy_json(path: Path) -> list[Sample]:
    """Decode Polygraphy's ``--save-inputs`` JSON without importing polygraphy."""
    data = _read_json(path, "polygraphy JSON file", BenchsetError)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise BenchsetError(f"polygraphy JSON file {path}: expected a list of {{input name: array}} objects")
    return [
        {
            name: _decode_polygraphy_array(value, f"polygraphy JSON file {path} [{i}] {name!r}")
            for name, value in item.items()
        }
        for i, item in enumerate(data)
    ]


def _decode_polygraphy_array(value: Any, where: str) -> np.ndarray[Any, Any]:
    is_array = isinstance(value, dict) and isinstance(value.get("array"), str)
    if not is_array or (value.get("polygraphy_class") != "ndarray" and "__polygraphy_encoded_ndarray" not in value):
        raise BenchsetError(f"{where}: expected an encoded ndarray {{'array': ..., 'polygraphy_class': 'ndarray'}}")
    text: str = value["array"]
    try:
        blob = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        try:
            blob = text.encode("latin-1")  # Polygraphy's older encoding
        except UnicodeEncodeError:
            raise BenchsetError(f"{where}: array is neither base64 nor latin-1 text") from None
    if blob.startswith(b"PK"):  # an npz of one array, also an older encoding
        arrays = load_npz(io.BytesIO(blob), label=where)
        if len(arrays) != 1:
            raise BenchsetError(f"{where}: embedded npz holds {len(arrays)} arrays, expected 1")
        return next(iter(arrays.values()))
    return load_npy_bytes(blob, where=where)


def read_run_results(path: Path, *, error: type[MonitorError] = BenchsetError) -> tuple[str, list[Sample]]:
    """The runner name and one ``{tensor name: array}`` per iteration of a ``--save-outputs`` file.

    A file holding several runners (``--trt --onnxrt``) is refused with their names: which one is
    the reference is the user's choice, made by saving that runner's results alone.
    """
    what = "polygraphy run results file"
    data = _read_json(path, what, error)
    runners = data.get("lst") if isinstance(data, dict) else None
    if not isinstance(runners, list) or data.get("polygraphy_class", "RunResults") != "RunResults":
        raise error(
            f"{what} {path}: expected {{'polygraphy_class': 'RunResults', 'lst': [...]}}"
            " (what polygraphy run --save-outputs writes)"
        )
    if not all(
        isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and isinstance(r[1], list) for r in runners
    ):
        raise error(f"{what} {path}: 'lst' must hold [runner name, [iteration, ...]] pairs")
    if len(runners) != 1:
        names = [r[0] for r in runners]
        raise error(f"{what} {path} holds the results of {len(runners)} runners {names}; save one runner's alone")
    runner, iterations = runners[0]
    samples = []
    for i, iteration in enumerate(iterations):
        outputs = iteration.get("outputs") if isinstance(iteration, dict) else None
        if not isinstance(outputs, dict):
            raise error(f"{what} {path}: iteration {i} of {runner!r} has no 'outputs' mapping")
        sample = {}
        for name, value in outputs.items():
            where = f"{what} {path} iteration {i} {name!r}"
            if isinstance(value, dict) and value.get("polygraphy_class") == "LazyArray":
                value = value.get("values")
            try:
                sample[str(name)] = _decode_polygraphy_array(value, where)
            except BenchsetError as exc:
                raise error(str(exc)) from None
        samples.append(sample)
    return runner, samples
