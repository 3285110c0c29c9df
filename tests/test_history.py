"""``onnxmon history`` and ``onnxmon db``: the story of a model, read straight off the terminal."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.results import Verdict
from monitor.store import Store
from tests.conftest import onnxmon
from tests.databases import postgres_schema
from tests.test_store import ENV_A, ENV_B, baseline_meta, output, result

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)

HEAD = Store("sqlite://").head_revision()


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "onnxmon.yaml"
    path.write_text("store:\n  url: sqlite:///history.db\n")
    return path


@pytest.fixture
def story(config_file: Path) -> Iterator[Store]:
    """Three passing runs on ORT 1.17, a promotion, then ORT 1.18 and failures; another node stays green."""
    with Store(f"sqlite:///{config_file.parent / 'history.db'}") as store:
        store.upgrade()
        store.record_baseline(baseline_meta("b1", T0 - timedelta(days=1)))
        store.record_promotion("resnet", "b1", "alice", at=T0 - timedelta(hours=1))
        for i in range(3):
            store.record_run(result(T0 + timedelta(hours=i), environment=ENV_A), node="gpu-1")
        for i in range(3, 5):
            store.record_run(result(T0 + timedelta(hours=i), Verdict.FAIL, environment=ENV_B), node="gpu-1")
        store.record_run(result(T0 + timedelta(hours=6), environment=ENV_A), node="gpu-2")
        yield store


def test_history_shows_the_environment_change_right_before_the_first_failure(
    story: Store, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = onnxmon("history", "resnet", "--node", "gpu-1", "-c", str(config_file))
    assert code == 0
    lines = out.splitlines()
    change = next(i for i, line in enumerate(lines) if "environment_changed" in line)
    # piped: tab-separated; the run id is the second column, the verdict the fourth
    passes = [i for i, line in enumerate(lines) if line.split("\t")[3:4] == ["pass"]]
    fails = [i for i, line in enumerate(lines) if line.split("\t")[3:4] == ["fail"]]
    run_ids = [line.split("\t")[1] for i, line in enumerate(lines) if i in passes + fails]
    assert all(run_id.isdigit() for run_id in run_ids) and len(set(run_ids)) == 5
    assert (len(passes), len(fails)) == (3, 2)
    assert max(passes) < change < min(fails)
    assert "onnxruntime.version 1.17.0" in out and "1.18.0" in out
    assert "baseline_promoted" in out and "gpu-2" not in out
    # max |err| 3e-05; error ÷ tolerance is not knowable from these hand-made metrics (rtol > 0, no error_ratio)
    assert re.search(r"\t3e-05\t-\tenvironment", out)


def test_history_shows_the_runs_error_ratio_the_largest_of_its_outputs(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = (
        output("logits", Verdict.FAIL, max_abs_error=3e-5, error_ratio=2.5),
        output("features", max_abs_error=1e-7, error_ratio=0.01),
        output("unknown", max_abs_error=1e-7, error_ratio=math.nan),
    )
    with Store(f"sqlite:///{config_file.parent / 'history.db'}") as store:
        store.upgrade()
        store.record_run(result(T0, Verdict.FAIL, outputs=outputs), node="gpu-1")
    code, out, _ = onnxmon("history", "resnet", "-c", str(config_file))
    assert code == 0 and re.search(r"\tlogits\t3e-05\t2.5\t", out), out
    assert out.splitlines()[0].split("\t")[6] == "error ÷ tolerance"
    code, out, _ = onnxmon("history", "resnet", "-o", "json", "-c", str(config_file))
    (run,) = [i for i in json.loads(out) if i["kind"] == "run"]
    assert run["error_ratio"] == 2.5


def test_history_json_lists_runs_and_events_newest_first(
    story: Store, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = onnxmon("history", "resnet", "--json", "-c", str(config_file))
    assert code == 0
    items = json.loads(out)
    assert [i["kind"] for i in items][:5] == ["run", "run", "run", "verdict_changed", "environment_changed"]
    assert items[0]["node"] == "gpu-2"
    failing = items[1]
    assert (failing["verdict"], failing["worst_output"], failing["attribution"]) == ("fail", "logits", "environment")
    assert failing["worst_max_abs_error"] == pytest.approx(3e-5)
    assert failing["worst_atol_ratio"] == pytest.approx(3.0)
    assert failing["outputs"] == []  # history carries the summary; `Store.run` has every output
    assert items[-1]["kind"] == "baseline_captured"


def test_history_since_keeps_only_recent_runs(
    story: Store, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    since = datetime.now(UTC) - (T0 + timedelta(hours=4, minutes=30))
    hours = f"{since.total_seconds() / 3600:.2f}h"
    code, out, _ = onnxmon("history", "resnet", "--since", hours, "--json", "-c", str(config_file))
    assert code == 0
    assert [i["node"] for i in json.loads(out) if i["kind"] == "run"] == ["gpu-2"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("history", "bert"), ("model 'bert' has no history in sqlite:///", "(models: resnet)")),
        (("history", "resnet", "--since", "last week"), ("--since: expected a duration",)),
    ],
)
def test_history_mistakes_are_one_line_errors(
    story: Store,
    config_file: Path,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    expected: tuple[str, ...],
) -> None:
    code, _, err = onnxmon(*argv, "-c", str(config_file))
    assert code == 2
    assert all(fragment in err for fragment in expected)
    assert len(err.strip().splitlines()) == 1


def test_db_upgrade_then_current_reports_the_head_revision(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = onnxmon("db", "upgrade", "-c", str(config_file))
    assert code == 0 and out.strip().endswith(f"empty -> {HEAD}")
    code, out, _ = onnxmon("db", "current", "--check", "-c", str(config_file))
    assert code == 0 and f"revision {HEAD}, head {HEAD} (up to date)" in out


@pytest.mark.postgres
def test_a_postgres_database_behind_head_is_reported_and_never_migrated_implicitly(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with postgres_schema(postgres_url) as url:
        with Store(url) as store:
            store.upgrade("0001")
        code, out, _ = onnxmon("db", "current", "--check", "--url", url)
        assert code == 1 and "behind: run `onnxmon db upgrade`" in out
        code, _, err = onnxmon("history", "resnet", "--url", url)
        assert code == 2 and f"is at schema revision 0001, this onnxmon needs {HEAD}" in err
        code, out, _ = onnxmon("db", "upgrade", "--url", url)
        assert code == 0 and f"0001 -> {HEAD}" in out and "postgres" in out


def test_an_80_column_terminal_keeps_times_run_ids_and_verdicts_on_one_line(story: Store) -> None:
    from rich.console import Console

    from monitor.cli.history_cmd import _table

    items = list(reversed(story.history("resnet", node="gpu-1")))
    console = Console(width=80, record=True, color_system=None)
    console.print(_table("resnet", items, width=80))
    screen = console.export_text()
    assert "when (UTC)" in screen, "the header is not folded in two"
    for run in (i.run for i in items if i.run is not None):
        stamp = run.started_at.astimezone(UTC).strftime("%m-%d %H:%M")
        row = rf"^ {re.escape(stamp)}\s+{run.id}\s+{run.verdict.value}\s"
        assert any(re.search(row, line) for line in screen.splitlines()), screen


@pytest.mark.process
def test_a_promotion_is_dated_when_it_happened_with_who_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 23: history dated a promotion at its baseline's capture time ("by baselines directory"),
    # so a run that still used the old baseline was listed after it; promote could not say why
    from tests import modelzoo
    from tests.workspace import Workspace

    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier(), count=2)
    config = str(ws.write())
    assert main(["baseline", "capture", "clf", "-q", "-c", config]) == 0  # the first one is active by itself
    assert main(["baseline", "capture", "clf", "-q", "-c", config]) == 0
    code, out, _ = onnxmon("baseline", "list", "clf", "-o", "json", "-c", config)
    candidate = next(b["id"] for b in json.loads(out) if not b["active"])
    assert main(["check", "clf", "-c", config]) == 0  # a run on the old baseline, after the capture
    capsys.readouterr()
    note = "ORT 1.20 GELU kernel; accuracy re-measured by the owner"
    code, _, _ = onnxmon("baseline", "promote", candidate, "--note", note, "--by", "alice", "-c", config)
    assert code == 0
    code, out, _ = onnxmon("history", "clf", "-o", "json", "-c", config)
    items = json.loads(out)  # newest first
    promoted = next(i for i in items if i["kind"] == "baseline_promoted" and i["new"] == candidate)
    run = next(i for i in items if i["kind"] == "run")
    assert items.index(promoted) < items.index(run), "the promotion comes after the run that used the old baseline"
    assert promoted["at"] > run["at"]
    assert (promoted["detail"]["by"], promoted["detail"]["note"]) == ("alice", note)
    code, out, _ = onnxmon("history", "clf", "-c", config)
    assert f"by alice: {note}" in out


@pytest.mark.process
@pytest.mark.parametrize("command", [["baseline", "capture", "clf", "--promote", "-q"], ["baseline", "import", "clf"]])
def test_a_promotion_by_capture_or_import_says_who_asked_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    # before: "by capture --promote" (and "by first baseline", and an import's "capture --promote"):
    # how, never who
    import getpass

    import numpy as np
    import onnxruntime as ort

    from tests import modelzoo
    from tests.workspace import Workspace

    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier(), count=2)
    config = str(ws.write())
    assert main(["baseline", "capture", "clf", "-q", "-c", config]) == 0  # the first: active by itself
    if command[1] == "import":  # a second baseline from outside (plain ORT outputs), promoted
        session = ort.InferenceSession(str(tmp_path / "models" / "clf.onnx"))
        files = []
        for index in range(2):
            feed = {
                i.name: np.ones([d if isinstance(d, int) else 2 for d in i.shape], np.float32)
                for i in session.get_inputs()
            }
            outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed), strict=True))
            np.savez(tmp_path / f"s{index}.npz", **outputs)
            files.append(str(tmp_path / f"s{index}.npz"))
        command = [*command, *files, "--promote"]
    assert main([*command, "-c", config]) == 0
    capsys.readouterr()
    code, out, _ = onnxmon("history", "clf", "-o", "json", "-c", config)
    assert code == 0
    promotions = [i["detail"]["by"] for i in json.loads(out) if i["kind"] == "baseline_promoted"]
    how = f"{command[1]} --promote"
    assert promotions == [f"{getpass.getuser()} ({how})", f"{getpass.getuser()} (first baseline)"], promotions


def test_tables_on_an_80_column_terminal_keep_words_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from monitor.cli import check_cmd, common, output
    from monitor.results import CheckResult as Result
    from tests.test_store import result as made

    monkeypatch.setattr(output, "is_terminal", lambda: True)
    monkeypatch.setattr(output, "console", lambda: Console(width=80))
    assert common.narrow_terminal()
    run: Result = made(T0, Verdict.FAIL)
    console = Console(width=80, record=True, color_system=None)
    console.print(check_cmd.render([run]))
    screen = console.export_text()
    header = next(line for line in screen.splitlines() if "verdict" in line)
    for word in ("model", "output", "verdict", "cosine", "reasons"):
        assert re.search(rf"\b{word}\b", header), (word, screen)
    assert "│" not in screen, "no vertical rules where width is short"
    assert run.model in screen and "fail" in screen
