"""``onnxmon rehearse`` over the real-model corpus: go / no-go exactly where plain ONNX Runtime drifts.

Production is this environment's ONNX Runtime; the candidate is the upgrade suite's second runtime
(``scripts/ort-venv``'s older release). For every corpus model a baseline is captured here (level
``all``, one thread), then the whole corpus is rehearsed on the candidate through the CLI. Ground
truth: ``scripts/drift_measure.py``'s plain ONNX Runtime + numpy worker, run by each interpreter on
the benchmark set's samples with the same settings, compared with numpy under onnxmon's default rule
(``|a-b| <= 1e-5 + 1e-4*|b|``, NaN at the same places; integers and labels exact). A model is no-go
exactly when that comparison leaves the rule somewhere, and every no-go names a likely cause.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.realmodels import ATOL, MODELS, RTOL, Prepared, prepare
from tests.stacks import REPO, Stack, child_env, current_stack, older_stack

pytestmark = [pytest.mark.realmodels, pytest.mark.slow]

SESSION = {"graph_optimization_level": "all", "intra_op_num_threads": 1}
WORKER = REPO / "scripts" / "drift_measure.py"


@pytest.fixture(scope="module")
def stacks() -> tuple[Stack, Stack]:
    return current_stack(), older_stack()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Prepared]]:
    cache: dict[str, Prepared] = {}
    for name in sorted(MODELS):
        item = prepare(cache, name, tmp_path_factory)
        item.ws.models[name]["session"] = dict(SESSION)
        item.ws.extra["daemon"] = {"diagnose_budget": "30s"}
        item.captured()
    yield cache


def plain_outputs(stack: Stack, item: Prepared, tmp: Path) -> dict[str, list[np.ndarray]]:
    """Plain ONNX Runtime of ``stack`` on the benchmark set's samples: ``{output: [array per sample]}``."""
    inputs = tmp / f"{item.model.name}-inputs"
    inputs.mkdir(exist_ok=True)
    for index, feeds in enumerate(item.samples()):
        np.savez(inputs / f"sample-{index:03d}.npz", **feeds)
    out = tmp / f"{item.model.name}-{stack.ort_version}.npz"
    command = [str(stack.python), "-I", str(WORKER), "worker", "--model", str(item.path), "--inputs", str(inputs)]
    subprocess.run(
        [*command, "--out", str(out), "--levels", "all", "--threads", "1"],
        check=True, capture_output=True, text=True, env=child_env(), timeout=600,
    )  # fmt: skip
    report = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert report["onnxruntime"] == stack.ort_version and "error" not in report["levels"]["all"], report
    with np.load(out, allow_pickle=False) as data:
        return {
            name: [data[f"Lall_S{s}_O{i}"] for s in range(report["samples"])]
            for i, name in enumerate(report["outputs"])
        }


def leaves_the_rule(candidate: list[np.ndarray], reference: list[np.ndarray]) -> bool:
    """numpy's verdict on one output: True when any sample breaks onnxmon's default rule (exact for non-floats)."""
    for a, b in zip(candidate, reference, strict=True):
        if a.dtype != b.dtype or a.shape != b.shape:
            return True
        if a.dtype.kind == "f":
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            same_nan = np.isnan(a64) == np.isnan(b64)
            close = np.isclose(a64, b64, rtol=RTOL, atol=ATOL, equal_nan=True) | (a64 == b64)
            if not (same_nan.all() and close.all()):
                return True
        elif not np.array_equal(a, b):
            return True
    return False


@pytest.fixture(scope="module")
def rehearsed(corpus: dict[str, Prepared], stacks: tuple[Stack, Stack]) -> dict[str, dict[str, Any]]:
    """Each model's rehearsal (its own workspace), as ``-o json`` prints it."""
    current, older = stacks
    found = {}
    for name, item in corpus.items():
        done = subprocess.run(
            [str(current.onnxmon), "rehearse", "--python", str(older.python), "-o", "json", "-c", str(item.ws.write())],
            cwd=item.ws.root, capture_output=True, text=True, env=child_env(), timeout=900,
        )  # fmt: skip
        assert done.returncode in (0, 1), f"{name}: exit {done.returncode}\n{done.stderr}"
        (found[name],) = json.loads(done.stdout)["models"]
        assert done.returncode == (0 if found[name]["go"] else 1), f"{name}: exit {done.returncode} for {found[name]}"
    return found


@pytest.mark.parametrize("name", sorted(MODELS))
def test_go_or_no_go_is_exactly_plain_orts_drift_beyond_tolerance(
    name: str,
    corpus: dict[str, Prepared],
    stacks: tuple[Stack, Stack],
    rehearsed: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    current, older = stacks
    item = corpus[name]
    production, candidate = plain_outputs(current, item, tmp_path), plain_outputs(older, item, tmp_path)
    assert set(production) == set(candidate)
    drifted = sorted(o for o in production if leaves_the_rule(candidate[o], production[o]))
    verdict = rehearsed[name]
    assert verdict["go"] is (not drifted), f"{name}: plain ORT drifts on {drifted}; rehearse said {verdict}"
    if not verdict["go"]:
        assert verdict["likely_cause"] and verdict["likely_cause"]["cause"], verdict


def test_the_rehearsal_summary(rehearsed: dict[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    no_go = {name: v["likely_cause"]["cause"] for name, v in rehearsed.items() if not v["go"]}
    with capsys.disabled():  # the figures for docs/realmodels.md (pytest -s shows them)
        print(f"\nrehearse on the corpus: {len(rehearsed) - len(no_go)} go, {len(no_go)} no-go {sorted(no_go.items())}")
    assert len(rehearsed) == len(MODELS)
