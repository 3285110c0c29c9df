"""Every JSON onnxmon writes is strict RFC 8259 JSON, with non-finite floats as strings (docs/json.md).

A strict parser (``json.loads(text, parse_constant=reject)``: a bare ``NaN``/``Infinity`` token
fails the test) reads each output: ``onnxmon check --json`` of a model against its own baseline
(identical outputs, so an SNR of +inf), the other ``--json`` commands, the HTTP API, the log
line, the store's JSON columns, spool entries, baseline files and localization reports. Then
``monitor.jsonsafe`` itself, value by value.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from monitor import jsonsafe
from monitor.api.app import create_app
from monitor.localize.report import LocalizationReport, NodeDivergence
from monitor.localize.sqnr import LayerSQNR
from monitor.results import AppliedTolerance, CheckResult, OutputMetrics, OutputStats, Reason, Verdict
from monitor.sinks.log import LogSink
from monitor.sinks.spool import Spool
from monitor.store import Store, schema
from tests import inprocess, modelzoo
from tests.conftest import onnxmon
from tests.test_metrics import RealDaemon
from tests.workspace import Workspace

TOKEN = "json-strict-token-4d1a"


def reject(token: str) -> Any:
    raise AssertionError(f"bare {token} token: not RFC 8259 JSON")


def strict(text: str) -> Any:
    """Parse ``text`` refusing the NaN/Infinity tokens Python's json module accepts by default."""
    return json.loads(text, parse_constant=reject)


def spellings(data: Any) -> set[str]:
    """The non-finite spellings that occur as string values anywhere in ``data``."""
    if isinstance(data, dict):
        return set().union(*(spellings(v) for v in data.values())) if data else set()
    if isinstance(data, list):
        return set().union(*(spellings(v) for v in data)) if data else set()
    return {data} if isinstance(data, str) and data in jsonsafe.SPELLINGS else set()


def non_finite_result(started_at: float = 2_000_000_000.0) -> CheckResult:
    """A failing result with every kind of non-finite float, in metrics, tolerance, timings and details."""
    metrics = OutputMetrics(element_count=4, max_abs_error=math.inf, snr_db=-math.inf, cosine_similarity=math.nan)
    tolerance = AppliedTolerance(atol=1e-5, rtol=1e-4, snr_min_db=-math.inf)
    output = OutputStats("prob", Verdict.FAIL, metrics, tolerance, (Reason("atol_rtol", "NaN"),), "float32", (1, 4))
    return CheckResult(
        "clf",
        Verdict.FAIL,
        started_at,
        started_at + 1,
        outputs=(output,),
        timings={"x": math.inf},
        details={"ratio": math.inf, "nested": (math.nan, 1.5)},
    )


@dataclass
class Setup:
    ws: Workspace
    baseline_id: str

    @property
    def config(self) -> str:
        return str(self.ws.config_file)

    @property
    def db(self) -> Path:
        return self.ws.root / "onnxmon.db"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    """A workspace with a promoted baseline of ``clf``, checked once (in this process), plus a stored non-finite run."""
    ws = Workspace(tmp_path_factory.mktemp("ws"))
    ws.add_model("clf", modelzoo.classifier())
    made = inprocess.capture_and_check(ws, "clf")
    with Store(f"sqlite:///{ws.root / 'onnxmon.db'}") as store:
        store.record_run(non_finite_result(), node="gpu-1")
    return Setup(ws, made.baseline_id)


# --- the CLI ------------------------------------------------------------------------------------


@pytest.mark.process
def test_check_json_of_a_model_against_its_own_baseline_writes_snr_as_the_string_infinity(setup: Setup) -> None:
    checked = onnxmon("check", "clf", "--json", "--no-store", "-c", setup.config)
    assert checked.exit_code == 0, checked.output
    (result,) = strict(checked.stdout)
    assert result["verdict"] == "pass"
    snrs = [o["metrics"]["snr_db"] for o in result["outputs"]]
    assert snrs and all(s == "Infinity" for s in snrs), "identical outputs: SNR +inf"
    assert all(math.isinf(float(s)) for s in snrs), "float() reads the spelling back"
    assert all(isinstance(o["metrics"]["max_abs_error"], float) for o in result["outputs"]), "finite: a number"


@pytest.mark.parametrize(
    "argv",
    [
        ("history", "clf", "--json"),
        ("baseline", "list", "clf", "--json"),
        ("baseline", "show", "{baseline}"),
        ("baseline", "history", "clf", "--json"),
        ("benchset", "list", "--json"),
        ("config", "show"),
        ("env", "show", "--json"),
        ("env", "diff", "--json", "current", "current"),
        pytest.param(("localize", "clf", "--json"), marks=pytest.mark.process),  # in a child
    ],
    ids=lambda argv: " ".join(a for a in argv if not a.startswith("{")),
)
def test_every_other_cli_json_output_is_strict(setup: Setup, argv: tuple[str, ...]) -> None:
    args = [a.format(baseline=setup.baseline_id) for a in argv]
    takes_config = args[0] not in ("env",)
    result = onnxmon(*args, *(["-c", setup.config] if takes_config else []))
    assert result.exit_code in (0, 1), result.output
    data = strict(result.stdout)
    if args[0] == "history":
        assert "Infinity" in spellings(data) and "NaN" in spellings(data), "the stored non-finite run"


# --- the HTTP API -------------------------------------------------------------------------------


@pytest.fixture
def client(setup: Setup, tmp_path: Path) -> Iterator[TestClient]:
    settings = setup.ws.settings()
    settings = settings.model_copy(update={"api": settings.api.model_copy(update={"token": TOKEN})})
    with Store(f"sqlite:///{tmp_path / 'history.db'}") as store:
        store.upgrade()
        daemon = RealDaemon(settings, store)
        daemon.run_now("clf")  # against its own baseline: SNR +inf
        daemon.dispatch(non_finite_result())
        yield TestClient(create_app(daemon), raise_server_exceptions=False)


def test_every_api_response_is_strict_json_and_says_infinity(client: TestClient) -> None:
    runs = strict(client.get("/api/v1/models/clf/runs").text)
    assert len(runs) == 2
    fingerprint = strict(client.get(f"/api/v1/runs/{runs[1]['id']}").text)["environment_fingerprint"]
    paths = [
        "/healthz",
        "/readyz",
        "/api/v1/models",
        "/api/v1/models/clf/runs",
        *(f"/api/v1/runs/{r['id']}" for r in runs),
        "/api/v1/models/clf/baselines",
        "/api/v1/events",
        f"/api/v1/environments/{fingerprint}",
        f"/api/v1/environments/diff?a={fingerprint}&b={fingerprint}",
        "/openapi.json",
    ]
    seen: set[str] = set()
    for path in paths:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text)
        seen |= spellings(strict(response.text))
    assert seen == {"Infinity", "-Infinity", "NaN"}
    newest = strict(client.get(f"/api/v1/runs/{runs[0]['id']}").text)
    prob = newest["outputs"][0]["metrics"]
    assert (prob["max_abs_error"], prob["snr_db"], prob["cosine_similarity"]) == ("Infinity", "-Infinity", "NaN")
    assert newest["timings"] == {"x": "Infinity"} and newest["details"] == {"ratio": "Infinity", "nested": ["NaN", 1.5]}
    own = strict(client.get(f"/api/v1/runs/{runs[1]['id']}").text)
    assert {o["metrics"]["snr_db"] for o in own["outputs"]} == {"Infinity"}


def test_the_api_check_now_response_is_strict(client: TestClient) -> None:
    response = client.post("/api/v1/models/clf/check", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.text
    body = strict(response.text)
    assert {o["metrics"]["snr_db"] for o in body["result"]["outputs"]} == {"Infinity"}


def test_the_openapi_schema_says_a_number_or_one_of_the_three_strings(client: TestClient) -> None:
    openapi = strict(client.get("/openapi.json").text)
    field = openapi["components"]["schemas"]["RunSummary"]["properties"]["duration_s"]
    kinds = field["anyOf"]
    assert {"type": "number"} in kinds
    assert {"Infinity", "-Infinity", "NaN"} == {v for k in kinds for v in k.get("enum", ())}


# --- sinks, store, files ------------------------------------------------------------------------


def test_the_log_line_is_strict(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="tests.jsonstrict"):
        LogSink(logging.getLogger("tests.jsonstrict")).write(non_finite_result())
    line = strict(caplog.records[0].getMessage())
    assert line["worst_output"]["max_abs_error"] == "Infinity"
    assert line["worst_output"]["error_ratio"] == "NaN", "max_abs_error alone cannot tell which |b| it met"


def test_every_json_column_of_the_store_is_strict_and_reads_back_as_before(setup: Setup) -> None:
    columns = [
        (table.name, column.name)
        for table in schema.Base.metadata.sorted_tables
        for column in table.columns
        if type(column.type).__name__ == "JSON"
    ]
    assert ("runs", "details") in columns and ("output_results", "tolerance") in columns
    seen: set[str] = set()
    with sqlite3.connect(setup.db) as db:
        for table, column in columns:
            for (text,) in db.execute(f'SELECT "{column}" FROM "{table}" WHERE "{column}" IS NOT NULL'):
                seen |= spellings(strict(text))
    assert {"Infinity", "-Infinity", "NaN"} <= seen
    with Store(f"sqlite:///{setup.db}") as store:
        run = next(r for r in store.runs("clf", limit=10) if r.verdict is Verdict.FAIL)
        stored = store.run(run.id)
    assert stored is not None
    assert stored.outputs[0].tolerance.snr_min_db == -math.inf, "tolerance strings become floats again"
    assert math.isinf(stored.outputs[0].metrics.max_abs_error), "metric columns are real floats"
    assert stored.details == {"ratio": "Infinity", "nested": ["NaN", 1.5]}, "free-form JSON as stored"


def test_spool_entries_are_strict_and_replay_with_their_floats(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    path = spool.append(non_finite_result(), node="gpu-1")
    assert spellings(strict(path.read_text(encoding="utf-8"))) == {"Infinity", "-Infinity", "NaN"}
    replayed = spool.read(path).result
    metrics, tolerance = replayed.outputs[0].metrics, replayed.outputs[0].tolerance
    assert metrics.max_abs_error == math.inf and metrics.snr_db == -math.inf and math.isnan(metrics.cosine_similarity)
    assert tolerance.snr_min_db == -math.inf and replayed.timings == {"x": math.inf}
    # a key monitor.details does not declare is read back as written, as the store reads it (text stays text)
    assert replayed.details == {"ratio": "Infinity", "nested": ["NaN", 1.5]}
    assert replayed.outputs[0].reasons[0].detail == "NaN", "text stays text"


def test_a_spool_entry_written_before_the_rule_still_replays(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    path = spool.append(non_finite_result())
    legacy = json.dumps(json.loads(path.read_text(encoding="utf-8"), parse_constant=float))
    legacy = legacy.replace('"Infinity"', "Infinity").replace('"-Infinity"', "-Infinity").replace('"NaN"', "NaN")
    path.write_text(legacy.replace('"detail": NaN', '"detail": "NaN"'), encoding="utf-8")
    assert spool.read(path).result.outputs[0].metrics.max_abs_error == math.inf


def test_baseline_files_are_strict(setup: Setup) -> None:
    files = [p for p in (setup.ws.root / "baselines").rglob("*") if p.suffix in (".json", ".jsonl")]
    assert {p.name for p in files} >= {"baseline.json", "promotions.jsonl"}
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines() if path.suffix == ".jsonl" else [path.read_text()]:
            strict(line)


def test_the_localization_report_is_strict_and_reads_back() -> None:
    nodes = (
        NodeDivergence(0, "a", "Relu", ("y",), math.inf, math.inf, 1e-6, True, True, False),
        NodeDivergence(1, "b", "Add", ("z",), math.nan, math.nan, -math.inf, True, True, True),
    )
    report = LocalizationReport("clf", "unoptimized", "all", nodes[0], nodes[0], nodes, nodes, runs=1, seconds=0.5)
    text = json.dumps(report.to_dict(), allow_nan=False)
    assert spellings(strict(text)) == {"Infinity", "-Infinity", "NaN"}
    again = LocalizationReport.from_dict(strict(text))
    assert again.first is not None and again.first.max_abs_error == math.inf
    assert math.isnan(again.profile[1].rel_error) and again.profile[1].threshold == -math.inf
    older = strict(text.replace('"Infinity"', '"inf"').replace('"-Infinity"', '"-inf"').replace('"NaN"', '"nan"'))
    assert LocalizationReport.from_dict(older).profile[1].threshold == -math.inf, "reports stored before the rule"
    layer = LayerSQNR(0, "n", "Conv", "t", "t_DequantizeLinear_Output", math.inf).to_dict()
    assert strict(json.dumps(layer, allow_nan=False))["sqnr_db"] == "Infinity"


# --- monitor.jsonsafe ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
        (math.nan, "NaN"),
        (1.5, 1.5),
        (-0.0, -0.0),
        (1e308, 1e308),
        (3, 3),
        (True, True),
        (None, None),
        ("NaN", "NaN"),
        ((1, math.inf), [1, "Infinity"]),
        (
            {"a": [math.nan, (2.5, -math.inf)], "b": {"c": math.inf}},
            {"a": ["NaN", [2.5, "-Infinity"]], "b": {"c": "Infinity"}},
        ),
        ({1: math.inf, math.inf: 1, None: 2, 2.5: 0}, {"1": "Infinity", "Infinity": 1, "None": 2, "2.5": 0}),
        (frozenset([math.inf]), ["Infinity"]),
        (np.float32("inf"), "Infinity"),
        (np.float64("-inf"), "-Infinity"),
        (np.int64(7), 7),
        (np.array([1.0, np.nan]), [1.0, "NaN"]),
    ],
    ids=repr,
)
def test_jsonable_replaces_non_finite_floats_and_nothing_else(value: Any, expected: Any) -> None:
    got = jsonsafe.jsonable(value)
    assert json.dumps(got, allow_nan=False) == json.dumps(expected, allow_nan=False)
    assert strict(jsonsafe.dumps(value)) == strict(json.dumps(expected))


def test_finite_floats_are_left_untouched() -> None:
    value = 0.1 + 0.2
    assert jsonsafe.jsonable(value) is value and jsonsafe.number(value) is value
    assert jsonsafe.dumps([value]) == json.dumps([value])


def test_dumps_is_always_strict_and_other_objects_go_through_default() -> None:
    with pytest.raises(TypeError):
        jsonsafe.dumps(math.inf, allow_nan=True)
    with pytest.raises(TypeError):
        jsonsafe.dumps(object())
    assert jsonsafe.dumps({"p": Path("/x")}, default=str) == '{"p": "/x"}'


@pytest.mark.parametrize("spelling", ["Infinity", "-Infinity", "NaN"])
def test_the_spellings_read_back_as_floats(spelling: str) -> None:
    expected = jsonsafe.SPELLINGS[spelling]
    for got in (float(spelling), jsonsafe.to_float(spelling), jsonsafe.restore([spelling])[0]):
        assert (math.isnan(got) and math.isnan(expected)) or got == expected


def test_loads_reads_the_strings_back_only_where_asked() -> None:
    text = jsonsafe.dumps({"metrics": {"snr_db": math.inf, "n": [math.nan]}, "detail": "NaN", "x": math.inf})
    data = jsonsafe.loads(text, floats=("metrics",))
    assert data["metrics"]["snr_db"] == math.inf and math.isnan(data["metrics"]["n"][0])
    assert data["detail"] == "NaN" and data["x"] == "Infinity"
    assert jsonsafe.loads(text) == strict(text)
    assert jsonsafe.to_float("text") == "text" and jsonsafe.to_float(2) == 2


@pytest.mark.parametrize(
    "literal",
    ["18446744073709551616", "-18446744073709551616", "1" + "0" * 400, "9" * 5000, "1e400", "-1e309", "1" * 400 + ".5"],
)
def test_json_read_back_has_bounded_numbers(literal: str) -> None:
    # issue 42 #1: a 400-digit integer in a float field was read, and float() of it raised OverflowError
    with pytest.raises(jsonsafe.NumberOutOfRange, match="out of"):
        jsonsafe.loads(f'{{"started_at": {literal}}}')


def test_json_read_back_keeps_every_number_within_the_bounds() -> None:
    text = "[18446744073709551615, -18446744073709551615, 1.7976931348623157e308, 5e-324, -0.0, NaN, -Infinity]"
    got = jsonsafe.loads(text)
    assert got[:5] == [2**64 - 1, -(2**64 - 1), 1.7976931348623157e308, 5e-324, -0.0]
    assert math.isnan(got[5]) and got[6] == -math.inf  # bare tokens of files older onnxmon versions wrote
