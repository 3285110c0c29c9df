"""``CheckResult.details`` and ``.environment`` are typed (``monitor.details``) on every shape of a run.

A real check of a model whose producer is the text ``"Infinity"``, in an environment with a numerics
variable set to ``"NaN"``: the text stays text through the spool (a real directory), the store (real
SQLite and PostgreSQL) and ``check -o json`` read back as the rehearsal reads it, while a float field of
the details keeps its non-finite value. Before the details were typed, the spool's reader turned every
such string inside them into a float (issue 37).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor import capture, jsonsafe, shapes
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.results import CheckResult, Verdict
from monitor.runtime import envsnap
from monitor.sinks.spool import Spool
from monitor.store import Store
from tests import modelzoo
from tests.databases import BACKENDS, database_url
from tests.workspace import Workspace

NOTE = "ORT_ONNXMON_TEST_NOTE"  # recorded by the snapshot (an ORT_ variable), read by nothing


@pytest.fixture(scope="module")
def spelled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, CheckResult]]:
    """A workspace whose model's producer is "Infinity", and a real check of it under ``NOTE=NaN``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(NOTE, "NaN")
        ws = Workspace(tmp_path_factory.mktemp("details"))
        model = modelzoo.classifier()
        model.producer_name = "Infinity"
        ws.add_model("m", model, count=2, dims={"batch": 2})
        ws.write()
        capture.capture_baseline(plan_for(ws.settings(), "m"))
        result = run_check(plan_for(ws.settings(), "m"))
        assert result.verdict is Verdict.PASS, result.reasons
        yield ws, result


def spelled_values(result: CheckResult) -> tuple[Any, Any]:
    return result.details["model"]["producer"], result.environment["fields"][f"env.{NOTE}"]["value"]


def test_a_real_check_carries_the_text_as_text(spelled: tuple[Workspace, CheckResult]) -> None:
    _, result = spelled
    assert spelled_values(result) == ("Infinity", "NaN")


def test_text_that_spells_a_non_finite_float_stays_text_through_the_spool(
    spelled: tuple[Workspace, CheckResult], tmp_path: Path
) -> None:
    _, result = spelled
    spool = Spool(tmp_path / "spool")
    back = spool.read(spool.append(result)).result
    assert spelled_values(back) == ("Infinity", "NaN")
    assert back.details == result.details and back.environment == result.environment
    # the snapshot read back is the one measured: its fingerprint, recomputed from the fields, agrees
    assert envsnap.EnvSnapshot.from_dict(back.environment).fingerprint == result.environment["fingerprint"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_text_that_spells_a_non_finite_float_stays_text_in_the_store(
    backend: str, spelled: tuple[Workspace, CheckResult], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    _, result = spelled
    with database_url(backend, tmp_path, request) as url, Store(url) as store:
        store.upgrade()
        record = store.run(store.record_run(result, node="n", pod="p"))
        assert record is not None
        assert record.details["model"]["producer"] == "Infinity"
        assert record.details == result.details


@pytest.mark.process
def test_text_that_spells_a_non_finite_float_stays_text_in_check_json_read_back(
    spelled: tuple[Workspace, CheckResult],
) -> None:
    ws, _ = spelled
    # A process of its own, as the rehearsal runs a candidate's check: an in-process run would ask this
    # test process's check worker, whose environment was read when an earlier test started it.
    command = [str(Path(sys.executable).parent / "onnxmon"), "check", "m", "--no-store", "-o", "json"]
    env = {**os.environ, NOTE: "NaN"}
    checked = subprocess.run([*command, "-c", str(ws.config_file)], capture_output=True, text=True, env=env)
    assert checked.returncode == 0, checked.stderr
    (printed,) = jsonsafe.loads(checked.stdout)  # as `onnxmon rehearse` reads a candidate's check
    times = {key: jsonsafe.epoch(printed[key]) for key in jsonsafe.CHECK_TIMES}
    back = CheckResult.from_dict({**printed, **times})
    assert spelled_values(back) == ("Infinity", "NaN")
    assert isinstance(back.details["session"]["load_seconds"], float)


def test_a_float_field_of_the_details_keeps_its_non_finite_value_through_the_spool(tmp_path: Path) -> None:
    details: Any = {"session": {"load_seconds": math.inf, "requested": ["NaN"]}, "benchset_note": "-Infinity"}
    result = CheckResult("m", Verdict.PASS, 0.0, 1.0, details=details, timings={"load_s": -math.inf})
    spool = Spool(tmp_path / "spool")
    back = spool.read(spool.append(result)).result
    assert back.details == details and back.timings == {"load_s": -math.inf}
    nan = CheckResult("m", Verdict.PASS, 0.0, 1.0, details={"session": {"load_seconds": math.nan}})
    assert math.isnan(spool.read(spool.append(nan)).result.details["session"]["load_seconds"])


def test_keys_the_type_does_not_declare_are_kept_as_they_are() -> None:
    # a newer version's key, or a document nobody declared: every shape keeps it, text as text
    data = {"model": "m", "verdict": "pass", "started_at": 0, "finished_at": 1}
    extra = {"ratio": "Infinity", "future": {"x": ["NaN", 1.5]}}
    back = CheckResult.from_dict(jsonsafe.loads(jsonsafe.dumps({**data, "details": extra, "environment": extra})))
    assert back.details == extra and back.environment == extra
    assert jsonsafe.loads(jsonsafe.dumps(back.to_dict()))["details"] == extra


def test_a_declared_key_that_does_not_fit_its_type_is_named() -> None:
    data = {"model": "m", "verdict": "pass", "started_at": 0, "finished_at": 1}
    with pytest.raises(shapes.ShapeError, match=r"CheckResult\.details\.session\.load_seconds: expected a number"):
        CheckResult.from_dict({**data, "details": {"session": {"load_seconds": "fast"}}})
    with pytest.raises(shapes.ShapeError, match=r"CheckResult\.environment\.fields\.x\.stable: expected bool"):
        CheckResult.from_dict({**data, "environment": {"fields": {"x": {"value": 1, "stable": "yes"}}}})
