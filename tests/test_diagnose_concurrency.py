"""The diagnosis's ``concurrency`` knob: serial against threads at once, so it can say "differs only under concurrency".

The faulty session is real ONNX Runtime whose answers move by one ULP when a call overlaps another,
patched into one process tree only (``tests/overlap_plugin.py``); every experiment child inherits it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.config.settings import SessionConfig
from monitor.diagnose import concurrency
from monitor.diagnose.knobs import Variation
from monitor.diagnose.result import Experiment
from monitor.results import CheckResult, Reason, Verdict
from tests.test_concurrency import patched, workspace


@pytest.mark.process
def test_a_session_that_differs_only_under_concurrency_is_diagnosed_so(tmp_path: Path) -> None:
    ws = workspace(tmp_path, 4)
    assert patched(ws, "baseline", "capture", "mm", "--quiet").returncode == 0
    done = patched(ws, "diagnose", "mm", "--no-store", "-o", "json")
    assert done.returncode == 0, done.stderr
    diagnosis = json.loads(done.stdout)
    [knob] = [e for e in diagnosis["experiments"] if e["knob"] == "concurrency"]
    assert knob["value"] == "serial vs 4 threads"
    assert knob["bitwise"] is False and knob["serial_bitwise"] is True
    assert 1 <= knob["answers_differing"] <= knob["overlapped_calls"] <= knob["calls"]
    # one ULP on one element: far inside the tolerance, but not the serial answer's bits
    assert knob["within_tolerance"] is True and knob["error_ratio"] < 1
    assert diagnosis["hypotheses"][0]["cause"] == "concurrency"
    assert diagnosis["summary"].startswith("likely cause: concurrency (measured: differs only under concurrency")
    # the serial replay reproduces nothing: the serial knobs are not a cause
    [current] = [e for e in diagnosis["experiments"] if e["knob"] == "current"]
    assert current["within_tolerance"] is True


def test_concurrent_answers_that_differ_serially_too_are_not_called_concurrency() -> None:
    setup = Variation("concurrency", "serial vs 4 threads", "concurrency", (), SessionConfig())
    measured = {"error_ratio": 0.5, "within_tolerance": True, "answers_differing": 3, "calls": 12, "threads": 4}
    serially_too = concurrency.experiment(setup, {**measured, "serial_bitwise": False})
    only = concurrency.experiment(setup, {**measured, "serial_bitwise": True, "differing_samples": [1, 2]})
    equal = concurrency.experiment(setup, {**measured, "answers_differing": 0, "serial_bitwise": True})
    assert concurrency.hypotheses([serially_too]) == [] and concurrency.hypotheses([equal]) == []
    [hypothesis] = concurrency.hypotheses([only])
    assert hypothesis.cause == "concurrency" and "samples 1, 2" in hypothesis.evidence[0]
    assert [e.outcome() for e in (serially_too, only, equal)] == [
        "differs under concurrency, serially too",
        "differs only under concurrency",
        "bitwise equal under concurrency",
    ]
    assert isinstance(only, Experiment)


def test_a_run_with_concurrency_variant_is_evidence_without_replays() -> None:
    run = CheckResult(
        model="m",
        verdict=Verdict.FAIL,
        started_at=0.0,
        finished_at=1.0,
        reasons=(Reason("concurrency_variant", "2 of 12 answers differ", "y"),),
    )
    [hypothesis] = concurrency.from_run(run)
    assert hypothesis.cause == "concurrency" and hypothesis.basis == "evidence"
    assert concurrency.from_run(CheckResult(model="m", verdict=Verdict.FAIL, started_at=0.0, finished_at=1.0)) == []
