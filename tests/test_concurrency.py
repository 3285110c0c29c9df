"""``models[].checks.concurrency: N``: the serial answers against the same session called from N threads at once.

The faulty session is real ONNX Runtime with one change, patched into one process tree only
(``tests/overlap_plugin.py``, run as the main script of ``onnxmon``): a call that overlaps another
gets its first float output nudged by one ULP. The ground truth is plain ONNX Runtime's answer on the
same file and inputs, computed here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from monitor.compare import bitwise
from monitor.config.schema import MAX_CONCURRENCY
from monitor.errors import ConfigError
from monitor.files import benchsets
from monitor.runtime import concurrent
from tests.conftest import Ran
from tests.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "tests" / "overlap_plugin.py"


def matmul_model() -> onnx.ModelProto:
    """x[batch, 512] @ W -> Tanh: tens of milliseconds a call, so calls from threads overlap even on a busy machine."""
    weights = (np.random.default_rng(0).standard_normal((512, 512)) / 20).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weights, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def workspace(tmp_path: Path, concurrency: Any) -> Workspace:
    ws = Workspace(tmp_path)
    checks = {"lint": False} if concurrency is None else {"lint": False, "concurrency": concurrency}
    ws.add_model("mm", matmul_model(), count=4, dims={"batch": 1024}, checks=checks)
    return ws


def patched(ws: Workspace, *argv: str) -> subprocess.CompletedProcess[str]:
    """``onnxmon ARGV`` in a process of its own whose ONNX Runtime answers differently under overlap."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(ws.root / "state")}
    env.pop("ONNXMON_FORKSERVER_MAIN", None)
    command = [sys.executable, str(PLUGIN), *argv, "-c", str(ws.write())]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ws.root, env=env)


def plain_answers(ws: Workspace) -> list[np.ndarray]:
    """Ground truth: plain ONNX Runtime, one call at a time, on the benchmark set onnxmon replays."""
    session = ort.InferenceSession(str(ws.root / "models" / "mm.onnx"), providers=["CPUExecutionProvider"])
    bench = benchsets.open_benchset(ws.root / "benchsets", "mm-bench")
    return [session.run(["y"], bench.load_sample(i))[0] for i in range(len(bench))]


@pytest.mark.process
def test_a_session_that_answers_differently_under_overlap_fails_with_concurrency_variant(tmp_path: Path) -> None:
    ws = workspace(tmp_path, 4)
    assert patched(ws, "baseline", "capture", "mm", "--quiet").returncode == 0
    done = patched(ws, "check", "mm", "--json", "--no-store")
    assert done.returncode == 1, done.stderr
    [result] = json.loads(done.stdout)
    assert result["verdict"] == "fail"
    [reason] = [r for r in result["reasons"] if r["code"] == "concurrency_variant"]
    assert reason["output"] == "y"
    found = result["details"]["concurrency"]
    assert found["threads"] == 4 and found["passes"] == 3
    assert found["calls"] >= 12  # 4 samples x 3 passes, and again while a thread is still waking
    assert found["overlapped_calls"] > 0 and found["max_in_flight"] >= 2
    differing = found["differing"]["y"]
    # the wrapper nudges only calls that overlapped (its window sits inside the one onnxmon measures)
    assert 1 <= differing["answers_differing"] <= found["overlapped_calls"]
    assert differing["samples"] and set(differing["samples"]) <= {0, 1, 2, 3}
    assert f"samples {', '.join(map(str, differing['samples']))}" in reason["detail"]
    assert differing["serial_rerun_bitwise"] is True
    truth = plain_answers(ws)[differing["first_sample"]]
    one_ulp = float(np.nextafter(truth.reshape(-1)[0], np.inf, dtype=np.float32) - truth.reshape(-1)[0])
    assert (differing["elements_differing"], differing["elements"]) == (1, truth.size)
    assert differing["max_abs_difference"] == pytest.approx(one_ulp, rel=0, abs=0)
    # the serial replay itself is plain ONNX Runtime's answer: every output within tolerance, bit for bit
    [output] = result["outputs"]
    assert output["verdict"] == "pass" and output["metrics"]["bitwise_equal"] is True


@pytest.mark.process
def test_the_same_faulty_session_passes_serially(tmp_path: Path) -> None:
    for setting in (None, 1, "off"):
        ws = workspace(tmp_path / str(setting), setting)
        assert patched(ws, "baseline", "capture", "mm", "--quiet").returncode == 0
        done = patched(ws, "check", "mm", "--json", "--no-store")
        assert done.returncode == 0, done.stdout + done.stderr
        [result] = json.loads(done.stdout)
        assert "concurrency" not in result["details"]


@pytest.mark.process
def test_plain_onnx_runtime_agrees_with_itself_under_concurrency(tmp_path: Path, run_cli: Callable[..., Ran]) -> None:
    ws = workspace(tmp_path, 4)
    config = ws.write()
    assert run_cli("baseline", "capture", "mm", "-c", config, "--quiet").exit_code == 0
    ran = run_cli("check", "mm", "-c", config, "--json", "--no-store")
    assert ran.exit_code == 0, ran.stdout
    [result] = json.loads(ran.stdout)
    found = result["details"]["concurrency"]
    assert found["calls"] >= 12 and found["differing"] == {} and found["failures"] == []
    assert found["overlapped_calls"] > 0


@pytest.mark.parametrize("value", [0, -1, MAX_CONCURRENCY + 1, True, 2.5, "many"])
def test_a_concurrency_out_of_bounds_is_a_config_error_naming_the_field(tmp_path: Path, value: Any) -> None:
    ws = workspace(tmp_path, value)
    with pytest.raises(ConfigError, match=r"checks\.concurrency"):
        ws.settings()


@pytest.mark.parametrize("value", [None, False, "off", 1, 4, MAX_CONCURRENCY])
def test_a_concurrency_in_bounds_loads(tmp_path: Path, value: Any) -> None:
    ws = workspace(tmp_path, value)
    expected = None if value in (None, False, "off") else value
    assert ws.settings().models[0].checks.concurrency == expected


@pytest.mark.parametrize(("samples", "threads", "passes"), [(4, 4, 3), (1, 4, 3), (10, 3, 3), (7, 64, 2), (100, 4, 3)])
def test_the_schedule_runs_every_sample_passes_times_with_every_thread_busy(
    samples: int, threads: int, passes: int
) -> None:
    rounds = concurrent.schedule(samples, threads, passes)
    calls = [s for dealt in rounds for jobs in dealt for s in jobs]
    counts = np.bincount(calls, minlength=samples)
    assert counts.min() >= passes and len(calls) < samples * passes + threads  # padding: under one call a thread
    for dealt in rounds:
        assert len(dealt) == threads
        assert len({len(jobs) for jobs in dealt}) == 1 and len(dealt[0]) <= concurrent.STRIPE
    if samples >= threads:  # a sample meets other neighbours: never only the same round companions
        companions = {s: set() for s in range(samples)}  # type: dict[int, set[int]]
        for dealt in rounds:
            together = {s for jobs in dealt for s in jobs}
            for s in together:
                companions[s] |= together - {s}
        assert all(companions[s] for s in range(samples))


def test_digests_are_bit_patterns() -> None:
    nan = np.array([np.nan], np.float32)
    payload = nan.view(np.uint32).copy()
    payload[0] ^= 1  # another NaN: equal as a float comparison, not bitwise
    other_nan = payload.view(np.float32)
    assert bitwise.digest(nan) == bitwise.digest(nan.copy())
    assert bitwise.digest(nan) != bitwise.digest(other_nan)
    assert bitwise.digest(np.array([0.0])) != bitwise.digest(np.array([-0.0]))
    assert bitwise.digest(np.zeros((2, 3))) != bitwise.digest(np.zeros((3, 2)))  # the shape counts
    assert bitwise.digest(np.zeros(3, np.float32)) != bitwise.digest(np.zeros(3, np.int32))  # the dtype counts
    strided = np.arange(12.0).reshape(3, 4).T
    assert bitwise.digest(strided) == bitwise.digest(np.ascontiguousarray(strided))
    assert bitwise.digest(np.array(["a", "bc"], object)) != bitwise.digest(np.array(["ab", "c"], object))
    a = np.array([1.0, np.nan, 0.0, 5.0], np.float32)
    b = np.array([1.0, np.nan, -0.0, 5.5], np.float32)
    found = bitwise.difference(a, b)
    expected = int((a.view(np.uint32) != b.view(np.uint32)).sum())  # numpy's own bit patterns
    assert (found.elements_differing, found.elements, found.max_abs_difference) == (expected, 4, 0.5)


def test_a_concurrent_replay_stopped_by_the_timeout_or_a_failure_is_a_reason_not_an_exception(
    tmp_path: Path,
) -> None:
    from monitor import capture
    from monitor.check import concurrency
    from monitor.config.plan import plan_for
    from monitor.runtime.session import Deadline, RunTimeout, Session

    ws = Workspace(tmp_path)
    ws.add_model("mm", matmul_model(), count=2, dims={"batch": 64}, checks={"lint": False})
    plan = plan_for(ws.settings(), "mm")
    capture.capture_baseline(plan)
    bench = benchsets.open_benchset(ws.root / "benchsets", "mm-bench")
    session = Session(plan.model.path, plan.model.providers, plan.model.session)
    serial = concurrency.SerialDigests()
    for index in range(len(bench)):
        serial.feed(index, session.run(bench.load_sample(index)))
    for timeout_s in (0.0, -1.0):  # the serial replay used the whole timeout
        found = concurrency.check_concurrency(session, bench, serial, threads=2, timeout_s=timeout_s)
        assert [r.code for r in found.reasons] == ["timeout"], found
        assert "not finished within the check's timeout" in found.details["note"]
    with Deadline(1e-3) as guard:  # a deadline that fires during the concurrent replay ends it as a timeout
        time.sleep(0.5)
        rounds = concurrent.schedule(len(bench), 2, concurrent.PASSES)
        with pytest.raises(RunTimeout):
            concurrent.replay_concurrently(session, rounds, load=bench.load_sample, each=lambda i, o: None, guard=guard)
    found = concurrency.check_concurrency(session, bench, serial, threads=2, timeout_s=60.0)
    assert found.reasons == () and found.details["differing"] == {} and found.details["calls"] >= 6
    for tensor in (ws.root / "benchsets" / "mm-bench").rglob("s00001_*.npy"):
        tensor.write_bytes(b"not a tensor any more")  # replaced between the serial and the concurrent replay
    found = concurrency.check_concurrency(session, bench, serial, threads=2, timeout_s=60.0)
    [reason] = found.reasons
    assert reason.code == "internal_error" and "checks.concurrency" in reason.detail
    assert found.details["note"] == reason.detail  # stopped: a reason, never an exception out of the check
