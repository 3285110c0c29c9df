"""Strings the store cannot hold (a NUL, a lone surrogate), ids in odd digits, escapes bound for a terminal.

PostgreSQL refuses a NUL in text and in JSON; SQLite's driver cannot encode a lone surrogate. One
boundary, the store, decides for both backends: what a check measured is kept with the character
replaced (U+FFFD), what a person types is refused with a message naming the field. Real SQLite and
PostgreSQL, the real API app, the real CLI (in a child for arguments that are not UTF-8).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client import generate_latest

from monitor.api.app import create_app
from monitor.cli import main
from monitor.config.settings import from_mapping
from monitor.daemon.root import Daemon
from monitor.results import CheckResult, Reason, Verdict
from monitor.sinks.database import DatabaseSink
from monitor.sinks.spool import Spool
from monitor.store import Store, incidents
from monitor.store.text import UnstorableText
from tests.databases import BACKENDS, database_url
from tests.test_metrics import RealDaemon
from tests.test_store import T0, output, result

TOKEN = "unstorable-token-1234"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with database_url(request.param, tmp_path, request) as url, Store(url) as opened:
        opened.upgrade()
        yield opened


def hostile_result() -> CheckResult:
    return result(
        T0,
        Verdict.FAIL,
        outputs=(output("lo\x00gits", Verdict.FAIL), output("feat\ud800")),
        reasons=(Reason("atol_rtol", "output 'lo\x00gits' moved \udcff"),),
        details={"note\x00": "bad \ud800 text", "nested": ["\x00"]},
        environment={"fingerprint": "f00d", "gpu": "A\x00100 \udc80"},
    )


def test_a_result_with_a_nul_or_a_lone_surrogate_is_stored_the_same_on_both_backends(store: Store) -> None:
    run_id = store.record_run(hostile_result(), node="node\x00-1")
    run = store.run(run_id)
    assert run is not None
    assert [o.name for o in run.outputs] == ["lo\ufffdgits", "feat\ufffd"]
    assert run.node == "node\ufffd-1"
    assert run.reasons[0].detail == "output 'lo\ufffdgits' moved \ufffd"
    assert store.environment("f00d") == {"fingerprint": "f00d", "gpu": "A\ufffd100 \ufffd"}


def test_a_result_the_store_refuses_is_kept_on_disk_and_counted_in_a_metric(tmp_path: Path) -> None:
    settings = from_mapping({"store": {"url": f"sqlite:///{tmp_path / 'h.db'}", "spool_dir": str(tmp_path / "s")}})
    store = Store(settings.store.url)
    store.upgrade()
    daemon = Daemon(settings, store=store)
    (sink,) = [s for s in daemon.sinks if isinstance(s, DatabaseSink)]
    refused = CheckResult(model="m", verdict=Verdict.PASS, started_at=float("nan"), finished_at=1.0)
    daemon.dispatch(refused)  # not an outage: nothing to wait for, but not lost either
    assert sink.refused == 1
    assert isinstance(sink.spool, Spool) and len(sink.spool.failed()) == 1 and sink.spooled == 0
    assert b"onnxmon_results_refused 1.0" in generate_latest(daemon.registry)
    store.close()


# --- incidents: the API, the form, the CLI ------------------------------------------------------------


def client_over(store: Store, tmp_path: Path) -> TestClient:
    settings = from_mapping({"store": {"url": store.url}, "api": {"token": TOKEN}})
    handle = RealDaemon(settings, store)
    handle.dispatch(result(T0, Verdict.FAIL))
    return TestClient(create_app(handle), raise_server_exceptions=False)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        # the schema says "no NUL" (so schemathesis and clients know): FastAPI's 422 like any invalid field
        ({"cause": "tf32", "text": "nul \x00 here"}, 422),
        ({"cause": "tf32", "text": "fine", "fix": "fix \x00"}, 422),
        ({"cause": "tf32", "text": "fine", "by": "me\x00"}, 422),
        # pydantic refuses a lone surrogate as a string (its echo of the input was a 500 before)
        ({"cause": "tf32", "text": "lone \ud800 surrogate"}, 422),
    ],
    ids=["text-nul", "fix-nul", "by-nul", "text-surrogate"],
)
def test_incident_text_the_store_cannot_hold_is_a_4xx_problem_on_both_backends(
    store: Store, tmp_path: Path, body: dict[str, str], status: int
) -> None:
    client = client_over(store, tmp_path)
    import json

    payload = json.dumps(body)  # ensure_ascii: a lone surrogate travels as its \\ud800 escape
    answer = client.post(
        "/api/v1/runs/1/incidents",
        content=payload,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    assert answer.status_code == status, answer.text
    assert set(answer.json()) == {"detail"}
    assert answer.json()["detail"][0]["loc"][:2] == [
        "body",
        next(k for k in body if k != "cause" and body[k] != "fine"),
    ]
    assert incidents.incidents(store) == []


@pytest.mark.parametrize("field", ["text", "fix", "by"])
def test_the_store_refuses_incident_text_it_cannot_hold_on_both_backends(store: Store, field: str) -> None:
    run_id = store.record_run(result(T0, Verdict.FAIL))
    typed = {"text": "seen", "fix": None, "by": "me"} | {field: "a\x00b"}
    with pytest.raises(UnstorableText, match=f"--{field} holds a NUL character"):
        incidents.record_incident(store, run_id, cause="tf32", signature={}, **typed)  # type: ignore[arg-type]
    typed[field] = "caf\udce9"  # what Python makes of the byte 0xe9 in an argument
    with pytest.raises(UnstorableText, match=f"--{field} holds a lone surrogate"):
        incidents.record_incident(store, run_id, cause="tf32", signature={}, **typed)  # type: ignore[arg-type]
    assert incidents.incidents(store) == []


def test_the_form_refuses_a_nul_with_a_4xx_page(store: Store, tmp_path: Path) -> None:
    client = client_over(store, tmp_path)
    form = f"token={TOKEN}&cause=tf32&text=a%00b&by=web"
    answer = client.post(
        "/runs/1/incidents", content=form, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert 400 <= answer.status_code < 500, answer.text[:300]
    assert incidents.incidents(store) == []


@pytest.mark.parametrize(
    "path", ["/api/v1/models/resnet/runs?node=%00", "/api/v1/incidents?model=%00", "/api/v1/events?kind=%00"]
)
def test_a_nul_in_a_query_finds_nothing_instead_of_failing_on_both_backends(
    store: Store, tmp_path: Path, path: str
) -> None:
    answer = client_over(store, tmp_path).get(path)
    assert answer.status_code == 200, answer.text[:300]


@pytest.mark.parametrize("path", ["/runs/\u0661", "/runs/\u0967"], ids=["arabic-indic", "devanagari"])
def test_pages_take_only_ascii_digits_as_run_ids(store: Store, tmp_path: Path, path: str) -> None:
    client = client_over(store, tmp_path)
    assert client.get("/runs/1").status_code == 200
    assert client.get(path).status_code == 404
    form = f"token={TOKEN}&cause=tf32&text=seen&by=web"
    noted = client.post(
        f"{path}/incidents", content=form, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert noted.status_code == 404, noted.text[:300]
    assert incidents.incidents(store) == []


def sqlite_config(tmp_path: Path) -> Path:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    with Store(url) as store:
        store.upgrade()
        store.record_run(result(T0, Verdict.FAIL))
    config = tmp_path / "onnxmon.yaml"
    config.write_text(yaml.safe_dump({"store": {"url": url}}))
    return config


@pytest.mark.database
@pytest.mark.process
def test_incident_note_with_arguments_that_are_not_utf8_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = sqlite_config(tmp_path)
    args = [b"incident", b"note", b"1", b"--cause", b"tf32", b"--text", b"caf\xe9 \xff", b"-c", os.fsencode(config)]
    done = subprocess.run(
        [os.fsencode(Path(sys.executable).parent / "onnxmon"), *args], capture_output=True, timeout=120, cwd=ROOT
    )
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert "--text" in stderr


def test_incident_show_and_list_never_send_terminal_escapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = sqlite_config(tmp_path)
    hostile = "\x1b]0;owned\x07\x1b[2Jgone\x1b[31m red\r\x08"
    with Store(f"sqlite:///{tmp_path / 'h.db'}") as store:
        incidents.record_incident(store, 1, cause="tf32", text=hostile, fix=hostile, by="\x1b[1mme", signature={})
    capsys.readouterr()
    for command in (["incident", "show", "1"], ["incident", "list"]):
        assert main([*command, "-c", str(config)]) == 0
        shown = capsys.readouterr().out
        assert "\x1b" not in shown and "\x07" not in shown and "\x08" not in shown and "\r" not in shown, repr(shown)
        assert "gone" in shown
