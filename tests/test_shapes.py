"""The run's shapes (pipe/API result JSON, spool entries, store rows, API JSON) from one definition.

``monitor.shapes`` derives every shape from the dataclasses of ``monitor.results``; these tests hold it
to what the hand-written mappers wrote before it (``tests/fixtures/shapes/``, written by commit f22121a:
files and rows of that version must still read, and the new mapping writes the same content), to real
check results round-tripped through every shape (values checked against plain ONNX Runtime + numpy),
to generated results (hypothesis), and to the declared exceptions (a field added to a dataclass
reaches every shape, or a test says which shape lacks it).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor import capture, jsonsafe, shapes
from monitor.api import schemas
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.details import Details, EnvironmentSnapshot
from monitor.files import benchsets
from monitor.results import (
    REASON_CODES,
    AppliedTolerance,
    CheckResult,
    DecisionStats,
    OutputMetrics,
    OutputStats,
    Reason,
    Verdict,
)
from monitor.sinks.spool import Spool
from monitor.store import RunRecord, Store, convert, schema
from tests import modelzoo
from tests.databases import BACKENDS, database_url
from tests.workspace import Workspace

FIXTURES = Path(__file__).parent / "fixtures" / "shapes"
NAMES = ("pass", "fail", "warn", "nonfinite", "error")  # the order they were spooled and stored in
RUN_IDS: dict[str, int] = json.loads((FIXTURES / "run-ids.json").read_text())
NO_ENV_DIFF = schemas.EnvDiff(a=None, b=None, summary="fixture", changes=[])


def text(value: Any) -> str:
    """One strict-JSON text of a value, keys sorted: equal texts mean equal shapes (NaN included)."""
    return jsonsafe.dumps(value, default=str, sort_keys=True)


# Fields added after the fixtures were written (the fleet vote, docs/fleet.md): an old document lacks them, so
# read back it holds their defaults; the old shapes are compared without them where they hold those defaults.
ADDED: dict[str, Any] = {"digests": [], "run_digest": None, "stack": {}, "stack_key": None}


def without_added(document: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if not (k in ADDED and v == ADDED[k])}


def old_result_text(name: str) -> str:
    return (FIXTURES / f"result-{name}.json").read_text()


def spooled() -> list[Any]:
    spool = Spool(FIXTURES / "spool")
    return [spool.read(path) for path in spool.entries()]


# --- what the old mappers wrote still reads, and is written again the same ---------------------------


@pytest.mark.parametrize("name", NAMES)
def test_a_result_document_of_the_old_mappers_reads_and_is_written_again_byte_for_byte(name: str) -> None:
    old = old_result_text(name)
    result = CheckResult.from_dict(jsonsafe.loads(old))
    assert jsonsafe.dumps(without_added(result.to_dict()), default=str, indent=1, sort_keys=True) + "\n" == old


def test_old_spool_entries_read_and_are_written_again_with_the_same_content(tmp_path: Path) -> None:
    entries = spooled()
    assert [e.key for e in entries] == [f"key-{n}" for n in NAMES]
    assert [(e.node, e.pod) for e in entries] == [("node-a", "pod-1")] * len(NAMES)
    again = Spool(tmp_path / "spool")
    for entry, path in zip(entries, Spool(FIXTURES / "spool").entries(), strict=True):
        assert text(without_added(entry.result.to_dict())) == text(json.loads(path.read_text())["result"])
        written = again.read(again.append(entry.result, node=entry.node, pod=entry.pod, key=entry.key))
        document = json.loads(written.path.read_text())
        assert document | {"result": without_added(document["result"])} == json.loads(path.read_text())


def test_an_old_spool_entry_and_an_old_result_document_are_the_same_result() -> None:
    for name, entry in zip(NAMES, spooled(), strict=True):
        assert text(without_added(entry.result.to_dict())) == text(json.loads(old_result_text(name)))


def test_rows_stored_by_the_old_mappers_read_as_the_results_they_were_written_from(tmp_path: Path) -> None:
    copy = tmp_path / "old.sqlite"
    copy.write_bytes((FIXTURES / "store.sqlite").read_bytes())
    with Store(f"sqlite:///{copy}") as store:
        store.upgrade()  # to this version's schema: the migrations keep the old rows as they were
        for name, entry in zip(NAMES, spooled(), strict=True):
            record = store.run(RUN_IDS[name])
            assert record is not None
            assert text([o.to_dict() for o in record.outputs]) == text([o.to_dict() for o in entry.result.outputs])
            assert record.reasons == entry.result.reasons
            assert record.timings.keys() == entry.result.timings.keys()
            assert text(dict(record.timings)) == text(dict(entry.result.timings))
            assert (record.node, record.pod, record.sample_count) == ("node-a", "pod-1", entry.result.sample_count)


def test_the_new_mapping_writes_the_same_rows_as_the_old_mappers(tmp_path: Path) -> None:
    new = tmp_path / "new.sqlite"
    with Store(f"sqlite:///{new}") as store:
        store.upgrade()
        for entry in spooled():
            store.record_run(entry.result, node=entry.node, pod=entry.pod, key=entry.key)
    old, ours = sqlite3.connect(FIXTURES / "store.sqlite"), sqlite3.connect(new)
    try:
        for table in ("runs", "output_results", "environments", "models", "events", "latest_runs"):
            columns = ", ".join(row[1] for row in old.execute(f"PRAGMA table_info({table})"))  # the old ones
            query = f"SELECT {columns} FROM {table} ORDER BY 1"
            assert ours.execute(query).fetchall() == old.execute(query).fetchall(), table
    finally:
        old.close()
        ours.close()


def test_the_api_shows_old_rows_as_the_old_mappers_did(tmp_path: Path) -> None:
    copy = tmp_path / "old.sqlite"
    copy.write_bytes((FIXTURES / "store.sqlite").read_bytes())
    runs = json.loads((FIXTURES / "api-runs.json").read_text())
    outputs = json.loads((FIXTURES / "api-outputs.json").read_text())
    with Store(f"sqlite:///{copy}") as store:
        store.upgrade()  # to this version's schema: the migrations keep the old rows as they were
        for name in NAMES:
            record = store.run(RUN_IDS[name])
            assert record is not None
            summary = json.loads(schemas.RunSummary.of(record).model_dump_json())
            assert without_added(summary) == runs[name]["summary"]
            detail = json.loads(schemas.RunDetail.build(record, NO_ENV_DIFF).model_dump_json())
            assert without_added(detail) == runs[name]["detail"]
            assert [json.loads(schemas.OutputOut.of(o).model_dump_json()) for o in record.outputs] == outputs[name]


# --- real checks through every shape ----------------------------------------------------------------


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, dict[str, CheckResult]]:
    """A pass, a fail (an initializer changed) and a fail demoted to warnings, of one real classifier."""
    ws = Workspace(tmp_path_factory.mktemp("shapes"))
    model = modelzoo.classifier()
    ws.add_model("m", model, count=4, dims={"batch": 6}, decisions={"logits": {"kind": "argmax", "axis": -1}})
    capture.capture_baseline(plan_for(ws.settings(), "m"))
    results = {"pass": run_check(plan_for(ws.settings(), "m"))}
    ws.replace_model("m", modelzoo.perturb_initializer(model, "w2", 0.3))
    results["fail"] = run_check(plan_for(ws.settings(), "m"))
    ws.set("m", tolerance={"default": {"numeric": "warn"}})
    results["warn"] = run_check(plan_for(ws.settings(), "m"))
    ws.replace_model("m", model)
    return ws, results


def plain_max_abs_errors(ws: Workspace, model_path: Path, baseline_model: Any) -> dict[str, float]:
    """Per output: max |changed - baseline| over the benchmark samples, from plain ONNX Runtime + numpy."""
    bench = benchsets.open_benchset(ws.settings().store.benchsets_dir, "m-bench")
    changed = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(baseline_model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in changed.get_outputs()]
    worst = dict.fromkeys(names, 0.0)
    for index in range(len(bench)):
        feed = bench.load_sample(index)
        for name, a, b in zip(names, changed.run(names, feed), original.run(names, feed), strict=True):
            diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
            worst[name] = max(worst[name], float(diff.max()))
    return worst


@pytest.mark.parametrize("backend", BACKENDS)
def test_real_results_round_trip_through_the_pipe_the_spool_and_the_store(
    backend: str, checked: tuple[Workspace, dict[str, CheckResult]], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ws, results = checked
    assert results["pass"].verdict is Verdict.PASS and results["fail"].verdict is Verdict.FAIL
    assert any(o.warnings for o in results["warn"].outputs) and any(o.decisions for o in results["fail"].outputs)
    spool = Spool(tmp_path / "spool")
    with database_url(backend, tmp_path, request) as url, Store(url) as store:
        store.upgrade()
        for name, result in results.items():
            want = text(result.to_dict())
            piped = CheckResult.from_dict(json.loads(jsonsafe.dumps(result.to_dict(), default=str)))
            assert text(piped.to_dict()) == want, f"{name}: the child -> parent pipe"
            assert text(spool.read(spool.append(result)).result.to_dict()) == want, f"{name}: the spool"
            record = store.run(store.record_run(result, node="n", pod="p"))
            assert record is not None
            assert text([o.to_dict() for o in record.outputs]) == text([o.to_dict() for o in result.outputs]), name
            assert record.reasons == result.reasons and record.verdict is result.verdict
            summary = schemas.RunSummary.of(record).model_dump()
            assert {k: summary[k] for k in ("model", "sample_count", "baseline_id")} == {
                "model": result.model,
                "sample_count": result.sample_count,
                "baseline_id": result.baseline_id,
            }
    # the values the shapes carry are the measured ones: max |a-b| against plain ONNX Runtime + numpy
    failed = {o.name: o.metrics.max_abs_error for o in CheckResult.from_dict(results["fail"].to_dict()).outputs}
    changed = ws.root / "changed.onnx"
    modelzoo.save(modelzoo.perturb_initializer(modelzoo.classifier(), "w2", 0.3), changed)
    plain = plain_max_abs_errors(ws, changed, modelzoo.classifier())
    assert failed.keys() == plain.keys()
    for name, value in plain.items():
        assert failed[name] == pytest.approx(value, rel=1e-12, abs=0.0), name


# --- generated results ---------------------------------------------------------------------------------

floats = st.floats(allow_nan=True, allow_infinity=True)
finite = st.floats(allow_nan=False, allow_infinity=False, width=32)
# text the store can hold as it is (it replaces NUL and lone surrogates, counted: tests/test_store.py)
storable = st.characters(blacklist_categories=("Cs", "Cc"))
names = st.text(storable, min_size=1, max_size=12)
reasons = st.builds(Reason, st.sampled_from(sorted(REASON_CODES)), st.text(storable, max_size=20), st.none() | names)
metrics = st.builds(
    OutputMetrics,
    **{
        f.name: (
            st.integers(0, 2**40)
            if f.type in ("int", int)
            else st.booleans()
            if f.type in ("bool", bool)
            else st.none() | st.integers(0, 2**40)
            if "int" in str(f.type)
            else st.none() | floats
            if "None" in str(f.type)
            else floats
        )
        for f in dataclasses.fields(OutputMetrics)
    },
)
tolerances = st.builds(
    AppliedTolerance,
    atol=floats,
    rtol=floats,
    cosine_min=st.none() | floats,
    topk_k=st.none() | st.integers(1, 10),
    numeric=st.sampled_from(["fail", "warn"]),
)
decisions = st.builds(
    DecisionStats,
    st.sampled_from(["argmax", "threshold", "equal"]),
    st.integers(0, 1000),
    st.integers(0, 1000),
    st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99)), max_size=3).map(tuple),
)
outputs = st.builds(
    OutputStats,
    names,
    st.sampled_from(list(Verdict)),
    metrics,
    tolerances,
    st.lists(reasons, max_size=2).map(tuple),
    st.sampled_from(["float32", "float16", "int64", ""]),
    st.lists(st.integers(0, 64), max_size=3).map(tuple),
    st.none() | decisions,
    st.lists(reasons, max_size=2).map(tuple),
)
spelled = st.sampled_from(list(jsonsafe.SPELLINGS))  # text that spells a non-finite float: text it stays
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | finite | st.text(max_size=8) | spelled,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def with_unknown_keys(known: st.SearchStrategy[dict[str, Any]], declared: type) -> st.SearchStrategy[dict[str, Any]]:
    """``known`` (typed keys) beside keys the type does not declare, which every shape keeps as they are."""
    unknown = names.filter(lambda key: key not in declared.__annotations__)
    return st.tuples(known, st.dictionaries(unknown, json_values, max_size=2)).map(lambda kv: {**kv[1], **kv[0]})


text_or_spelled = st.text(storable, max_size=8) | spelled
details = with_unknown_keys(
    st.fixed_dictionaries(
        {},
        optional={
            "session": st.fixed_dictionaries(
                {},
                optional={
                    "requested": st.lists(text_or_spelled, max_size=2),
                    "provider_options": st.dictionaries(names, st.dictionaries(names, text_or_spelled, max_size=2)),
                    "placement": st.dictionaries(names, st.integers(0, 999), max_size=2),
                    "load_seconds": floats,
                },
            ),
            "model": st.fixed_dictionaries({"producer": text_or_spelled, "size_bytes": st.integers(0, 2**40)}),
            "benchset_version": st.integers(1, 999),
            "env_diff": st.lists(
                st.fixed_dictionaries(
                    {"field": names, "old": json_values, "new": json_values, "stable": st.booleans()}
                ),
                max_size=2,
            ),
            "baseline_source": text_or_spelled,
            "input_casts": st.dictionaries(names, text_or_spelled, max_size=2),
            "benchset_note": text_or_spelled,
            "lint": st.dictionaries(st.text(max_size=6), json_values, max_size=3),
            "worker": st.fixed_dictionaries({"pid": st.integers(1, 2**22), "session_built": st.booleans()}),
        },
    ),
    Details,
)
environments = with_unknown_keys(
    st.fixed_dictionaries(
        {},
        optional={
            "fingerprint": names,
            "captured_at": text_or_spelled | finite,
            "fields": st.dictionaries(
                names, st.fixed_dictionaries({"value": json_values, "stable": st.booleans()}), max_size=3
            ),
        },
    ),
    EnvironmentSnapshot,
)
results = st.builds(
    CheckResult,
    names,
    st.sampled_from(list(Verdict)),
    finite,
    finite,
    reasons=st.lists(reasons, max_size=2).map(tuple),
    outputs=st.lists(outputs, max_size=3).map(tuple),
    baseline_id=st.none() | names,
    providers_requested=st.lists(names, max_size=2).map(tuple),
    sample_count=st.integers(0, 10_000),
    timings=st.dictionaries(names, floats, max_size=3),
    environment=environments,
    attribution=st.none() | st.sampled_from(sorted(REASON_CODES)),
    details=details,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(results)
def test_any_result_round_trips_through_the_json_and_the_spools_reading(result: CheckResult) -> None:
    data = result.to_dict()
    back = CheckResult.from_dict(jsonsafe.loads(jsonsafe.dumps(data)))
    assert text(back.to_dict()) == text(data)
    if not any(isinstance(v, float) and math.isnan(v) for v in _leaves(data)):
        assert back == result  # NaN is never equal to itself; without one the values are equal outright


@pytest.mark.parametrize("where", ["details", "environment"])
def test_a_string_that_spells_a_non_finite_float_stays_a_string(where: str) -> None:
    # What the laptop (random) profile of the property above draws and CI's derandomized one does not.
    result = CheckResult("m", Verdict.PASS, 0.0, 1.0, **{where: {"note": "Infinity"}})
    back = CheckResult.from_dict(jsonsafe.loads(jsonsafe.dumps(result.to_dict())))
    assert getattr(back, where) == {"note": "Infinity"}


@settings(max_examples=150, deadline=None)
@given(outputs)
def test_any_output_round_trips_through_its_row(output: OutputStats) -> None:
    row = convert.output_row(output, run_id=1)
    row.tolerance = json.loads(convert.json_dumps(row.tolerance))  # the JSON column as the database returns it
    assert text(convert.output_stats(row).to_dict()) == text(output.to_dict())


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


# --- the declared exceptions: a new field reaches every shape, or a test names the one it misses --------


def columns(table: type) -> set[str]:
    return {c.name for c in table.__table__.columns}  # type: ignore[attr-defined]


def test_every_result_field_is_a_run_column_or_declared_kept_apart() -> None:
    fields = set(shapes.field_names(CheckResult)) | {"duration_s", "all_reasons"}
    missing = fields - columns(schema.Run) - set(convert.RUN_APART)
    assert not missing, f"CheckResult fields with no runs column (add a migration, or declare in RUN_APART): {missing}"


def test_every_output_field_is_an_output_column_or_declared() -> None:
    declared = {convert.OUTPUT_FLAT, *convert.OUTPUT_IN_TOLERANCE}
    assert set(shapes.field_names(OutputStats)) - columns(schema.OutputResult) - declared == set()
    assert set(shapes.field_names(OutputMetrics)) <= columns(schema.OutputResult)


def test_every_stored_run_field_comes_from_a_column_or_from_the_reader() -> None:
    from_reader = {"model", "outputs", "error_ratio"}  # the model's name, the output rows, derived from them
    assert set(shapes.field_names(RunRecord)) - columns(schema.Run) - from_reader == set()


def test_the_api_shows_every_field_but_the_declared_hidden_ones() -> None:
    run_fields = set(shapes.field_names(RunRecord))
    assert set(schemas.RunSummary.model_fields) == run_fields - set(schemas.RUN_HIDDEN)
    hidden_in_detail = set(schemas.RUN_HIDDEN) - set(schemas.RUN_IN_DETAIL)
    assert set(schemas.RunDetail.model_fields) == run_fields - hidden_in_detail | {"env_diff"}
    assert set(schemas.OutputOut.model_fields) == set(shapes.field_names(OutputStats)) | {"error_ratio"}


def test_a_field_that_does_not_fit_is_named() -> None:
    data = json.loads(old_result_text("fail"))
    data["outputs"][0]["metrics"]["element_count"] = "many"
    with pytest.raises(shapes.ShapeError, match=r"CheckResult\.outputs\[0\]\.metrics\.element_count"):
        CheckResult.from_dict(data)
    del data["model"]
    with pytest.raises(shapes.ShapeError, match="missing field 'model'"):
        CheckResult.from_dict(data)


def test_a_spool_entry_with_a_field_that_does_not_fit_is_refused_naming_the_file(tmp_path: Path) -> None:
    entry = json.loads((FIXTURES / "spool" / "000000000002.json").read_text())
    entry["result"]["reasons"] = [{"code": "not_a_code"}]
    path = tmp_path / "000000000001.json"
    path.write_text(json.dumps(entry))
    with pytest.raises(ValueError, match=f"{path}.*reasons"):
        Spool(tmp_path).read(path)
