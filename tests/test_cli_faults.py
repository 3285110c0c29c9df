"""The CLI fails in one line with the documented exit code, never with a traceback (issue 17, item 8)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor import capture
from monitor.config.plan import plan_for
from monitor.store import Store
from tests import modelzoo
from tests.disks import fill
from tests.workspace import Workspace

BIN = Path(sys.executable).parent


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    workspace = Workspace(tmp_path)
    workspace.add_model("clf", modelzoo.classifier(), count=2)
    workspace.write()
    return workspace


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def serve(ws: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "onnxmon"), "serve", "-c", str(ws.config_file), *args],
        cwd=ws.root,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.process
@pytest.mark.server
def test_serve_on_a_port_in_use_says_so_in_one_line(ws: Workspace, taken_port: int) -> None:
    result = serve(ws, "--port", str(taken_port))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"cannot listen on 127.0.0.1:{taken_port}: the port is already in use" in result.stderr


@pytest.mark.process
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "Invalid value for '--port'"),
        (["--host", "no.such.host.invalid", "--port", "1"], "api.host: 'no.such.host.invalid' does not resolve"),
    ],
)
def test_serve_with_an_impossible_address_is_a_usage_error(ws: Workspace, args: list[str], message: str) -> None:
    result = serve(ws, *args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert message in result.stderr


# --- check: an unreachable store loses nothing (issue 17, item 3) ----------------------------------


def check(ws: Workspace, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "onnxmon"), "check", "-c", str(ws.config_file), *args],
        cwd=ws.root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def baselined(ws: Workspace) -> Workspace:
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    return ws


@pytest.mark.process
def test_check_with_an_unreachable_sqlite_store_spools_the_result_and_exits_3(baselined: Workspace) -> None:
    spool = baselined.root / "spool-elsewhere"
    env = {"ONNXMON_STORE__URL": "sqlite:////proc/no/such/dir/x.db", "ONNXMON_STORE__SPOOL_DIR": str(spool)}
    result = check(baselined, "--json", env=env)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout)[0]["verdict"] == "pass"  # the measurement is printed all the same
    assert "1 result(s) spooled in" in result.stderr and str(spool) in result.stderr
    assert len(list(spool.glob("*.json"))) == 1
    # The next check against a store that works writes the backlog back first, in order.
    back = check(baselined, "-q", env={"ONNXMON_STORE__SPOOL_DIR": str(spool)})
    assert back.returncode == 0, back.stderr
    assert list(spool.glob("*.json")) == []
    with Store(baselined.settings().store.url) as store:
        assert len(store.history("clf", limit=10)) == 2


@pytest.mark.process
def test_check_whose_store_and_spool_both_fail_prints_the_result_and_exits_3(baselined: Workspace) -> None:
    blocker = baselined.root / "a-file"
    blocker.write_text("not a directory")
    env = {"ONNXMON_STORE__URL": f"sqlite:///{blocker}/x.db", "ONNXMON_STORE__SPOOL_DIR": str(blocker / "spool")}
    result = check(baselined, "--json", env=env)
    assert result.returncode == 3
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout)[0]["model"] == "clf"
    assert "1 result(s) not recorded" in result.stderr


@pytest.mark.postgres
def test_check_against_a_missing_postgresql_database_spools_and_exits_3(
    baselined: Workspace, postgres_url: str
) -> None:
    url = postgres_url.rsplit("/", 1)[0] + "/onnxmon_no_such_database"
    spool = baselined.root / "pg-spool"
    result = check(baselined, "-q", env={"ONNXMON_STORE__URL": url, "ONNXMON_STORE__SPOOL_DIR": str(spool)})
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr and "does not exist" in result.stderr
    assert len(list(spool.glob("*.json"))) == 1


# --- check: the timeout is hard, as in the daemon (issue 17, item 7) --------------------------------


@pytest.mark.process
def test_check_of_a_hung_model_is_cut_at_its_timeout_in_a_child(ws: Workspace) -> None:
    ws.add_model("spin", modelzoo.hang(iterations=1), count=1, dims={}, timeout="2s")
    capture.capture_baseline(plan_for(ws.settings(), "spin"))
    ws.replace_model("spin", modelzoo.hang(iterations=10**10))
    result = check(ws, "spin", "--json", "--no-store")
    assert result.returncode == 3, result.stderr
    (outcome,) = json.loads(result.stdout)
    assert [r["code"] for r in outcome["reasons"]] == ["timeout", "model_changed"]  # the hanging file is new


# --- names are data, not markup (issue 17, item 4) --------------------------------------------------

HOSTILE_NAME = "[/]logits [bold]raw[/bold]"


@pytest.mark.process
def test_rich_markup_in_an_output_name_is_shown_verbatim_in_check_and_history(ws: Workspace) -> None:
    model = modelzoo.classifier()
    old = model.graph.output[0].name
    model.graph.output[0].name = HOSTILE_NAME
    for node in model.graph.node:
        node.input[:] = [HOSTILE_NAME if name == old else name for name in node.input]
        node.output[:] = [HOSTILE_NAME if name == old else name for name in node.output]
    ws.add_model("odd", model, count=2)
    capture.capture_baseline(plan_for(ws.settings(), "odd"))
    shown = check(ws, "odd", env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stderr and "MarkupError" not in shown.stderr
    assert "[bold]raw[/bold]" in shown.stdout  # fold may wrap the cell, but nothing is swallowed
    history = subprocess.run(
        [str(BIN / "onnxmon"), "history", "odd", "-c", str(ws.config_file)],
        cwd=ws.root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert history.returncode == 0, history.stderr
    assert "[/]logits" in history.stdout


# --- one line and exit 2, never a traceback (issue 17, item 8) --------------------------------------


def onnxmon(ws: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "onnxmon"), *args, "-c", str(ws.config_file)],
        cwd=ws.root,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.process
def test_benchset_create_with_shapes_too_big_to_allocate_is_refused_before_allocating(ws: Workspace) -> None:
    ws.benchsets["clf"]["generate"]["dims"] = {"batch": 2**31 - 1}
    ws.write()
    result = onnxmon(ws, "benchset", "create", "clf-bench")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
    assert "input 'x' of shape (2147483647, 16) (float32) would take" in result.stderr


@pytest.mark.process
def test_benchset_create_on_a_full_disk_is_one_line_and_leaves_no_partial_version(
    ws: Workspace, tiny_tmpfs: Path
) -> None:
    ws.benchsets["clf"]["generate"]["dims"] = {"batch": 4096}  # 256 KiB a sample, 2 samples
    ws.extra["store"] = {"url": "sqlite:///onnxmon.db", "baselines_dir": "baselines", "benchsets_dir": str(tiny_tmpfs)}
    ws.write()
    filler = fill(tiny_tmpfs)
    try:
        result = onnxmon(ws, "benchset", "create", "clf-bench")
    finally:
        filler.unlink()
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "cannot write v1" in result.stderr and "No space left on device" in result.stderr
    assert not list(tiny_tmpfs.glob("clf-bench/v*"))
    assert not list(tiny_tmpfs.glob("clf-bench/.tmp-*"))


@pytest.mark.process
def test_a_polygraphy_json_nested_100k_deep_is_a_benchset_error(ws: Workspace) -> None:
    deep = ws.root / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    ws.benchsets["deep"] = {"name": "deep", "polygraphy_json": str(deep)}
    ws.write()
    result = onnxmon(ws, "benchset", "create", "deep")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "nested too deeply" in result.stderr


@pytest.mark.process
def test_history_since_further_back_than_datetime_reaches_is_everything(baselined: Workspace) -> None:
    assert check(baselined, "-q").returncode == 0
    result = onnxmon(baselined, "history", "clf", "--since", "99999999d")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "pass" in result.stdout


@pytest.mark.process
def test_baseline_capture_of_a_hung_model_is_cut_at_its_timeout(ws: Workspace) -> None:
    ws.add_model("spin", modelzoo.hang(iterations=10**10), count=1, dims={}, timeout="2s")
    ws.write()
    result = onnxmon(ws, "baseline", "capture", "spin", "--timeout", "2s", "-q")
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert "did not finish: timeout" in result.stderr
    assert not [p for p in (ws.root / "baselines" / "spin").glob("*") if not p.name.startswith(".")]


@pytest.mark.database
@pytest.mark.parametrize("url", ["postgresql+psycopg://postgres@127.0.0.1:1/test"], ids=["refused"])
@pytest.mark.parametrize("command", [["db", "current"], ["db", "upgrade"], ["history", "m"], ["incident", "list"]])
def test_a_command_whose_store_cannot_be_used_says_so_in_one_line_and_exits_3(
    tmp_path: Path, url: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from monitor.cli import main

    config = tmp_path / "onnxmon.yaml"
    config.write_text(f"store:\n  url: {url!r}\n")
    assert main([*command, "-c", str(config)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("onnxmon: error: the history store cannot be used"), err


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("nosuchdriver://host/db", "no database takes this URL"),
        ("mysql+pymysql://u:secret@host/db", "its database driver is not installed"),
    ],
    ids=["no dialect", "no driver"],
)
@pytest.mark.parametrize(
    "command", [["check"], ["db", "current"], ["db", "upgrade"], ["history", "m"], ["incident", "list"]]
)
def test_a_store_url_this_installation_cannot_open_is_a_config_error_exit_2(
    tmp_path: Path, url: str, says: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 41: docs said 3. No retry or spool could ever reach such a store (a typo'd dialect made `check`
    spool every result for it and exit 3): the config is wrong or an extra is missing, a usage error."""
    from monitor.cli import main

    config = tmp_path / "onnxmon.yaml"
    models = "models: [{name: m, path: m.onnx, benchset: b}]\nbenchsets: [{name: b, imported: true}]\n"
    config.write_text(f"store:\n  url: {url!r}\n  spool_dir: {str(tmp_path / 'spool')!r}\n{models}")
    assert main([*command, "-c", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "secret" not in err[0], err
    assert not (tmp_path / "spool").exists() or not any((tmp_path / "spool").rglob("*.json")), "nothing spooled"
