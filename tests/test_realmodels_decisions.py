"""Decisions over the real-model corpus: onnxmon's flip counts equal plain ONNX Runtime + numpy's.

Each corpus model that decides something gets ``decisions:`` as its user would write them (a class
per row for scores, a yes/no for a probability, labels compared as they are; a ZipMap's table by
argmax, its keys as labels), a baseline from the pristine file, then a model-file variant (the
largest weight scaled by 1.001, fp16 with and without fp32 I/O, int8 dynamic and static QDQ). For
every decided output, ``outputs[].decisions`` of the check must equal what this file computes
itself from two plain ``onnxruntime`` sessions (pristine and variant) with ``numpy``: the total,
the number flipped, and the first flipped (sample, row). Nothing of onnxmon's comparison is used
for the ground truth. With ``ONNXMON_DECISIONS_LOG`` set, each case appends its counts there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.check import run_check
from tests import variants
from tests.realmodels import Prepared, fit_inputs, not_applicable, prepare, session

pytestmark = pytest.mark.realmodels

ARGMAX: dict[str, Any] = {"kind": "argmax", "axis": -1}
EQUAL: dict[str, Any] = {"kind": "equal"}


def threshold(value: float) -> dict[str, Any]:
    return {"kind": "threshold", "value": value}


DECISIONS: dict[str, dict[str, dict[str, Any]]] = {
    "vietcombank-captcha": {f"digit_{i}": ARGMAX for i in range(5)},
    "captcha-external-data": {f"digit_{i}": ARGMAX for i in range(5)},
    "torch-cnn-legacy": {"probs": ARGMAX},
    "torch-cnn-dynamo": {"probs": ARGMAX},
    "slovorez": {"output_0": ARGMAX},  # a float16 output
    "tashkeel-bilstm": {"logits": ARGMAX},
    "tashkeel-rawi-v3": {"presence": threshold(0.5), "value": ARGMAX},
    "tashkeel-rawi-ensemble": {"gated_cls": EQUAL},  # int64 labels
    "romanizer-decoder": {"logprobs": ARGMAX},
    "silero-vad": {"output": threshold(0.5)},
    "voicefilter-lite": {"mask": threshold(0.5)},
    "sudachi-b": {"403": EQUAL},
    "sk-logreg-nozipmap": {"label": EQUAL, "probabilities": ARGMAX},
    "surfaces-validity": {"label": EQUAL, "probabilities": ARGMAX},
    "sk-logreg-zipmap": {"output_label": EQUAL, "output_probability": ARGMAX},  # a ZipMap
    "sk-pipeline": {"output_label": EQUAL, "output_probability": ARGMAX},
    "sk-logreg-strings": {  # string labels, a ZipMap with string keys
        "output_label": EQUAL,
        "output_probability": ARGMAX,
        "output_probability:keys": EQUAL,
    },
    "sk-tree-columns": {"output_label": EQUAL, "scat": threshold(0.5)},
}


def _fp16(keep_io_types: bool) -> Callable[[Prepared], object]:
    return lambda item: variants.fp16(item.pristine, item.path, keep_io_types=keep_io_types)


def _int8(static: bool) -> Callable[[Prepared], object]:
    return lambda item: variants.quantize(item.pristine, item.path, static=static, samples=item.samples())


VARIANTS: dict[str, Callable[[Prepared], object]] = {
    "weight-x1.001": lambda item: variants.edit_largest_weight(
        item.pristine, item.path, item.model.external_data, variants.scaled
    ),
    "fp16-keep-io": _fp16(True),
    "fp16": _fp16(False),
    "int8-dynamic": _int8(False),
    "int8-qdq": _int8(True),
}


# --- ground truth: plain ONNX Runtime and numpy ---------------------------------------------------


def as_array(value: Any, keys: bool = False) -> np.ndarray:
    """An ORT output as numpy: a ZipMap (list of dicts) as its (maps, sorted keys) table, or its keys."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        union = sorted({k for row in value for k in row})
        if keys:
            return np.array(union)
        return np.array([[row.get(k, np.nan) for k in union] for row in value], dtype=np.float32)
    return np.asarray(value)


def decided(decision: Mapping[str, Any], array: np.ndarray) -> np.ndarray:
    if decision["kind"] == "argmax":
        return np.argmax(array, axis=decision["axis"]).ravel()
    if decision["kind"] == "threshold":
        return (array.astype(np.float64) > decision["value"]).ravel()
    return array.ravel()


def numpy_flips(item: Prepared, decisions: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per decided output: total decisions, flipped ones and the first flipped (sample, row), from plain ORT."""
    before, after = session(item.pristine), session(item.path)
    names = sorted({name.split(":")[0] for name in decisions})
    counts = {name: {"total": 0, "flipped": 0, "first": None} for name in decisions}
    for index, feeds in enumerate(item.samples()):
        ours = dict(zip(names, after.run(names, fit_inputs(after, feeds)), strict=True))
        theirs = dict(zip(names, before.run(names, feeds), strict=True))
        for name, decision in decisions.items():
            output, keys = name.split(":")[0], name.endswith(":keys")
            a, b = decided(decision, as_array(ours[output], keys)), decided(decision, as_array(theirs[output], keys))
            assert a.shape == b.shape, f"{name}: decisions of another shape ({a.shape} vs {b.shape})"
            differ = np.flatnonzero(a != b)
            count = counts[name]
            count["total"] += a.size
            count["flipped"] += differ.size
            if count["first"] is None and differ.size:
                count["first"] = (index, int(differ[0]))
    return counts


def log(line: dict[str, Any]) -> None:
    target = os.environ.get("ONNXMON_DECISIONS_LOG")
    if target:
        with Path(target).open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


@pytest.fixture(scope="module")
def prepared() -> Iterator[dict[str, Prepared]]:
    yield {}


CASES = [(model, variant) for model in sorted(DECISIONS) for variant in VARIANTS]


@pytest.mark.parametrize(("name", "variant"), CASES)
def test_flipped_decisions_equal_plain_numpys(
    name: str, variant: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    skip = not_applicable(variant).get(name)
    if skip:
        pytest.skip(skip)
    item = prepare(prepared, name, tmp_path_factory)
    item.ws.models[name]["decisions"] = DECISIONS[name]
    item.captured()
    try:
        VARIANTS[variant](item)
    except variants.NotApplicable as exc:
        pytest.skip(str(exc))
    truth = numpy_flips(item, DECISIONS[name])
    result = run_check(item.plan())
    outputs = {o.name: o for o in result.outputs}
    for output, want in truth.items():
        stats = outputs[output]
        assert stats.decisions is not None, f"{name}/{variant}/{output}: {stats.verdict} {stats.reasons}"
        got = stats.decisions
        first = got.flips[0] if got.flips else None
        log({"model": name, "variant": variant, "output": output, "kind": got.kind, "total": got.total,
             "flipped": got.flipped, "numpy_total": want["total"], "numpy_flipped": want["flipped"]})  # fmt: skip
        assert (got.total, got.flipped, first) == (want["total"], want["flipped"], want["first"]), output
        changed = any(r.code == "decision_changed" for r in stats.reasons)
        assert changed == (want["flipped"] > 0), f"{output}: {stats.reasons}"
