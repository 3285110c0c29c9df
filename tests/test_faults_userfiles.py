"""Files a user or a crash can replace: FIFOs, devices, symlinks to them and huge files, wherever onnxmon reads.

Every case is real: ``os.mkfifo``, ``/dev/zero``, a sparse 1 GiB file made with ``truncate``, a real SQLite
store. Anything that could block runs in a child process with a deadline and a memory cap
(``RLIMIT_AS``), so a regression fails the test instead of hanging the suite or filling the machine.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from monitor.daemon.root import Daemon
from monitor.results import CheckResult, Verdict
from monitor.sinks.database import DatabaseSink
from monitor.sinks.spool import Spool
from monitor.store import Store
from tests.workspace import Workspace

GIB = 1 << 30
MEMORY_CAP = 1536 * (1 << 20)  # a child reading a 1 GiB file or /dev/zero into memory would pass it


def fifo(path: Path) -> None:
    os.mkfifo(path)


def dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def huge(path: Path) -> None:
    with path.open("wb") as handle:
        handle.truncate(GIB)  # sparse: a gigabyte to read, nothing on disk


SPECIALS: dict[str, Callable[[Path], None]] = {"fifo": fifo, "dev_zero": dev_zero, "huge": huge}


def run_capped(code: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter with an address-space cap; fails the test if it runs past ``timeout``."""
    prelude = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({MEMORY_CAP}, {MEMORY_CAP}))\n"
    try:
        return subprocess.run(
            [sys.executable, "-c", prelude + textwrap.dedent(code), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=Path(__file__).resolve().parents[1],
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung past {timeout} s: {code.strip().splitlines()[-1]}")


def a_result(index: int) -> CheckResult:
    return CheckResult(model="m", verdict=Verdict.PASS, started_at=1000.0 + index, finished_at=1000.5 + index)


# --- the spool (B2) -----------------------------------------------------------------------------------


@pytest.mark.process
@pytest.mark.parametrize("kind", sorted(SPECIALS))
def test_a_fifo_device_or_huge_spool_entry_is_set_aside_and_the_rest_is_written_back(tmp_path: Path, kind: str) -> None:
    spool = Spool(tmp_path / "spool")
    spool.append(a_result(0))  # 000000000001.json
    SPECIALS[kind](spool.directory / "000000000002.json")
    spool.append(a_result(2))  # 000000000003.json
    code = """
        import sys
        from pathlib import Path
        from monitor.sinks.database import DatabaseSink
        from monitor.sinks.spool import Spool
        from monitor.store import Store
        store = Store(f"sqlite:///{sys.argv[1]}")
        store.upgrade()
        sink = DatabaseSink(store, spool=Spool(Path(sys.argv[2])), retry_s=3600)
        print("written", sink.flush(), "set_aside", sink.spool.set_aside, "left", sink.spooled)
        print("runs", len(store.runs("m")))
    """
    began = time.monotonic()
    done = run_capped(code, str(tmp_path / "h.db"), str(spool.directory))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "written 2 set_aside 1 left 0" in done.stdout and "runs 2" in done.stdout, done.stdout + done.stderr
    assert time.monotonic() - began < 30
    assert [p.name for p in spool.failed()] == ["000000000002.json"]
    assert "spooled result 000000000002.json set aside" in done.stderr
    assert "not a regular file" in done.stderr or "larger than" in done.stderr


def deep_json(path: Path) -> None:
    path.write_text("[" * 200_000)  # json's decoder recurses: RecursionError, not ValueError


def directory_colliding_in_failed(path: Path) -> None:
    path.mkdir()
    (path.parent / "failed").mkdir(exist_ok=True)
    (path.parent / "failed" / path.name).write_text("an entry set aside earlier under the same name")


def wrong_types(path: Path) -> None:
    path.write_text('{"format": 1, "result": {"model": "m", "verdict": "pass", "started_at": {"a": [1]}}}')


@pytest.mark.parametrize("poison", [deep_json, directory_colliding_in_failed, wrong_types], ids=lambda f: f.__name__)
def test_a_poison_spool_entry_never_stops_the_write_back(tmp_path: Path, poison: Callable[[Path], None]) -> None:
    spool = Spool(tmp_path / "spool")
    spool.append(a_result(0))
    poison(spool.directory / "000000000002.json")
    spool.append(a_result(2))
    with Store(f"sqlite:///{tmp_path / 'h.db'}") as store:
        store.upgrade()
        sink = DatabaseSink(store, spool=spool, retry_s=3600)
        assert sink.flush() == 2
        assert sink.spooled == 0 and spool.set_aside == 1
        assert [r.started_at.timestamp() for r in store.runs("m")] == [1002.0, 1000.0]


def test_a_spool_entry_with_a_number_no_float_holds_is_set_aside_counted_and_the_rest_reaches_the_store(
    tmp_path: Path,
) -> None:
    # issue 42 #1: a float field written as a 400-digit integer raised OverflowError in Spool.read, so the
    # write-back stopped at that entry on every retry and no later result reached the store
    ws = Workspace(tmp_path)
    settings = ws.settings()
    store = Store(settings.store.url)
    store.upgrade()
    daemon = Daemon(settings, store=store)
    try:
        (sink,) = [s for s in daemon.sinks if isinstance(s, DatabaseSink)]
        assert sink.spool is not None
        spool = sink.spool
        for index in (1, 2, 3):
            spool.append(a_result(index))
        poisoned = spool.entries()[0]
        poisoned.write_text(poisoned.read_text().replace('"started_at": 1001.0', '"started_at": 1' + "0" * 400))
        assert sink.flush() == 2
        assert sorted(r.started_at.timestamp() for r in store.runs("m")) == [1002.0, 1003.0]
        assert [p.name for p in spool.failed()] == [poisoned.name] and sink.spooled == 0
        assert spool.set_aside == 1
        assert daemon.registry.get_sample_value("onnxmon_spool_set_aside") == 1.0
    finally:
        daemon.stop()
        store.close()


def hold(sink: DatabaseSink, release: threading.Event) -> None:
    with sink.writing():  # what a write that never returns does to the writer's turn
        release.wait()


def test_readyz_says_not_ready_while_the_writer_is_stuck(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    settings = ws.settings()
    store = Store(settings.store.url)
    store.upgrade()
    daemon = Daemon(settings, store=store)
    (sink,) = [s for s in daemon.sinks if isinstance(s, DatabaseSink)]
    sink.stall_after_s = 0.5
    assert daemon.readiness()["results_writable"] is True
    release = threading.Event()
    holder = threading.Thread(target=lambda: hold(sink, release), daemon=True)
    holder.start()
    time.sleep(1.0)
    try:
        checks = daemon.readiness()
        assert checks["results_writable"] is False
        assert "has been writing for" in daemon.readiness_reasons()["results_writable"]
    finally:
        release.set()
        holder.join(10)
    assert daemon.readiness()["results_writable"] is True
    store.close()


# --- the config file (B7) -----------------------------------------------------------------------------


@pytest.mark.process
@pytest.mark.parametrize("kind", sorted(SPECIALS))
def test_config_validate_of_a_fifo_device_or_huge_config_is_one_line_in_bounded_time(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "onnxmon.yaml"
    SPECIALS[kind](path)
    done = run_capped(
        "import sys\nfrom monitor import cli\nsys.exit(cli.main(sys.argv[1:]))", "config", "validate", "-c", str(path)
    )
    assert done.returncode == 2, done.stdout + done.stderr[-2000:]
    # `config validate` lists every problem under one header line: here the one problem, naming the file
    problem = done.stderr.strip().splitlines()[-1]
    assert f"config file {path} cannot be read:" in problem and len(done.stderr.splitlines()) <= 2, done.stderr
    assert ("not a regular file" if kind != "huge" else "larger than 8 MiB") in problem
    assert "Traceback" not in done.stderr


def test_a_reload_after_the_config_became_a_fifo_fails_at_once_and_says_so(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    path = ws.write()
    daemon = Daemon(ws.settings(), config_path=path)
    path.unlink()
    os.mkfifo(path)
    answered: list[bool] = []
    reload = threading.Thread(target=lambda: answered.append(daemon.reload()), daemon=True)
    reload.start()
    reload.join(20)
    if reload.is_alive():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("a reload hung reading a config that is a FIFO")
    assert answered == [False]
    daemon.stop()


# --- store.url_file (B10) and api.token_file ----------------------------------------------------------


@pytest.mark.process
@pytest.mark.parametrize("url", ["sqlite:///x\x00.db", "sqlite:///x.db\x1b[2J"], ids=["nul", "escape"])
def test_a_control_character_in_the_url_file_is_a_config_error(tmp_path: Path, url: str) -> None:
    (tmp_path / "url").write_bytes(url.encode())
    config = tmp_path / "onnxmon.yaml"
    config.write_text(yaml.safe_dump({"store": {"url_file": "url"}}))
    done = run_capped(
        "import sys\nfrom monitor import cli\nsys.exit(cli.main(sys.argv[1:]))", "config", "validate", "-c", str(config)
    )
    assert done.returncode == 2, done.stdout + done.stderr
    problem = done.stderr.strip().splitlines()[-1]  # under `config validate`'s one header line
    assert f"store.url_file: {tmp_path / 'url'} does not hold a database URL" in problem, done.stderr
    assert len(done.stderr.splitlines()) <= 2 and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "content",
    ["t" * 40 + "x" * (70 * 1024), "tttttttttttttttttttttttttttttttttttttttt\nsecond"],
    ids=["long", "two lines"],
)
def test_a_token_file_too_long_or_of_two_lines_disables_writes_with_the_warning(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    from monitor.api.app import _configured_token
    from monitor.config.settings import from_mapping

    secret = tmp_path / "token"
    secret.write_text(content)
    settings = from_mapping({"api": {"token_file": str(secret)}})
    with caplog.at_level(logging.WARNING, logger="monitor.api.app"):
        assert _configured_token(settings) is None
    assert any(
        f"api.token_file {secret}" in r.getMessage() and "mutating calls disabled" in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.process
@pytest.mark.parametrize("kind", sorted(SPECIALS))
def test_a_url_file_that_is_a_fifo_device_or_huge_is_one_line_under_the_cap(tmp_path: Path, kind: str) -> None:
    secret = tmp_path / "url"
    SPECIALS[kind](secret)
    config = tmp_path / "onnxmon.yaml"
    config.write_text(yaml.safe_dump({"store": {"url_file": str(secret)}}))
    done = run_capped(
        "import sys\nfrom monitor import cli\nsys.exit(cli.main(sys.argv[1:]))", "config", "validate", "-c", str(config)
    )
    assert done.returncode == 2, done.stdout + done.stderr[-2000:]
    problem = done.stderr.strip().splitlines()[-1]  # under `config validate`'s one header line
    assert f"store.url_file: {secret}" in problem, done.stderr[-2000:]
    assert ("is larger than" if kind == "huge" else "is not a regular file") in problem, done.stderr[-2000:]
    assert len(done.stderr.splitlines()) <= 2 and "Traceback" not in done.stderr


@pytest.mark.process
@pytest.mark.parametrize("kind", sorted(SPECIALS))
def test_a_token_file_that_is_a_fifo_device_or_huge_disables_writes_under_the_cap(tmp_path: Path, kind: str) -> None:
    # the token is read at every mutating request: a FIFO would hang it, /dev/zero or 1 GiB fill the memory
    secret = tmp_path / "token"
    SPECIALS[kind](secret)
    code = """
        import logging, sys
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        from monitor.api.app import _configured_token
        from monitor.config.settings import from_mapping
        print("token:", _configured_token(from_mapping({"api": {"token_file": sys.argv[1]}})))
    """
    done = run_capped(code, str(secret))
    assert done.returncode == 0 and done.stdout.strip() == "token: None", done.stdout + done.stderr[-2000:]
    (warning,) = done.stderr.strip().splitlines()
    assert f"api.token_file {secret} cannot be read" in warning and "mutating calls disabled" in warning, warning
    assert ("larger than 64 KiB" if kind == "huge" else "not a regular file") in warning, warning


@pytest.mark.process
@pytest.mark.parametrize("kind", sorted(SPECIALS))
def test_a_lint_cache_file_that_is_a_fifo_device_or_huge_is_linted_again_under_the_cap(
    tmp_path: Path, kind: str
) -> None:
    # the lint cache ($XDG_STATE_HOME/onnxmon/lint/<key>.json) is read before every cold check's lint
    code = f"""
        import sys
        from pathlib import Path
        import onnx
        from monitor.exportcheck import lint_warnings
        from tests import modelzoo
        root = Path(sys.argv[1])
        onnx.save(modelzoo.classifier(), str(root / "m.onnx"))
        def lint():
            return lint_warnings.cached_lint(root / "m.onnx", "0" * 64, support=None, varied=dict, inputs_key="k",
                                             directory=root / "lint")
        assert lint()[1] is False and lint()[1] is True  # written, then read back
        (cache,) = (root / "lint").iterdir()
        cache.unlink()
        from tests.test_faults_userfiles import SPECIALS
        SPECIALS[{kind!r}](cache)
        report, cached = lint()
        again = "linted again" if report is not None and not cached else "cached?"
        print(again, cache.is_file() and not cache.is_symlink())
    """
    done = run_capped(code, str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["linted", "again", "True"], done.stdout + done.stderr[-1000:]


# --- files named on the command line --------------------------------------------------------------


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A model with a captured baseline, for the commands that take a file beside a configured model."""
    from monitor import capture
    from monitor.config.plan import plan_for
    from tests import modelzoo

    ws = Workspace(tmp_path_factory.mktemp("configured"))
    ws.add_model("clf", modelzoo.classifier())
    capture.capture_baseline(plan_for(ws.settings(), "clf"))
    ws.write()
    return ws


COMMANDS: dict[str, Callable[[Workspace, Path], list[str]]] = {
    "benchset import": lambda ws, p: ["benchset", "import", "s", str(p), "--kind", "npz", "--root", str(ws.root / "s")],
    "baseline import": lambda ws, p: ["baseline", "import", "clf", *[str(p)] * 4, "-c", str(ws.config_file)],
    "localize --reference": lambda ws, p: [
        "localize", "clf", "-c", str(ws.config_file), "--against", "model", "--reference", str(p)
    ],
    "sqnr --float": lambda ws, p: ["sqnr", "clf", "-c", str(ws.config_file), "--float", str(p)],
}  # fmt: skip


@pytest.mark.process
@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_fifo_or_device_named_on_the_command_line_is_said_to_be_one_not_missing(
    configured: Workspace, tmp_path: Path, command: str, kind: str
) -> None:
    # it exists: "not found" / "no such file" sent the operator looking for a file that is right there
    path = tmp_path / ("input.npz" if "import" in command else "reference.onnx")
    SPECIALS[kind](path)
    done = run_capped(
        "import sys\nfrom monitor import cli\nsys.exit(cli.main(sys.argv[1:]))", *COMMANDS[command](configured, path)
    )
    assert done.returncode == 2, done.stdout + done.stderr[-2000:]
    said = " ".join(done.stderr.split())
    assert "not a regular file" in said and ("a FIFO" if kind == "fifo" else "a character device") in said, said
    assert "not found" not in said and "no such" not in said and "Traceback" not in said, said


# --- baselines and benchset manifests on disk ---------------------------------------------------------

READERS = {
    "ACTIVE": (
        "b/m/ACTIVE",
        "from monitor.files import baselines\nbaselines.active_id(Path(sys.argv[1]) / 'b', 'm')",
    ),
    "baseline.json": (
        "b/m/b1/baseline.json",
        "from monitor.files import baselines\nbaselines.list_baselines(Path(sys.argv[1]) / 'b', 'm')",
    ),
    "promotions": (
        "b/m/promotions.jsonl",
        "from monitor.files import baselines\nbaselines.promotions(Path(sys.argv[1]) / 'b', 'm')",
    ),
    "polygraphy": (
        "inputs.json",
        "from monitor.files import polygraphy\npolygraphy.read_polygraphy_json(Path(sys.argv[1]) / 'inputs.json')",
    ),
    "onnx test data": (
        "t/test_data_set_0/input_0.pb",
        "from monitor.files import benchset_sources\n"
        "benchset_sources.read_onnx_test_inputs(Path(sys.argv[1]) / 't', input_names=['x'])",
    ),
    "manifest.yaml": (
        "s/v1/manifest.yaml",
        "from monitor.files import benchset_manifest\n"
        "benchset_manifest.read_manifest(Path(sys.argv[1]) / 's' / 'v1', 's', 1)",
    ),
}


@pytest.mark.process
@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "huge"])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_baseline_or_manifest_file_that_is_a_fifo_device_or_huge_is_one_error(
    tmp_path: Path, reader: str, kind: str
) -> None:
    where, call = READERS[reader]
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    if reader not in ("ACTIVE", "manifest.yaml", "polygraphy", "onnx test data") and kind != "huge":
        pytest.skip("stat-checked as a regular file first: a FIFO or a device there is not a baseline file")
    if reader == "onnx test data" and kind == "huge":
        pytest.skip("a 1 GiB tensor is within the 4 GiB one input may hold")
    SPECIALS[kind](path)
    code = f"""
        import sys
        from pathlib import Path
        from monitor.errors import MonitorError
        try:
            {call.replace(chr(10), chr(10) + " " * 12)}
        except MonitorError as exc:
            print("refused:", exc)
    """
    done = run_capped(code, str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("refused:") and str(path) in done.stdout, done.stdout + done.stderr[-1000:]


@pytest.mark.process
def test_a_small_file_under_a_large_limit_is_read_without_reserving_the_limit(tmp_path: Path) -> None:
    # read(n) allocates n bytes up front: asking for limit + 1 would fail under the cap for any file
    (tmp_path / "small").write_bytes(b"x" * 100)
    code = """
        import sys
        from monitor import bounded
        print(len(bounded.read_bytes(sys.argv[1], limit=8 << 30)))
    """
    done = run_capped(code, str(tmp_path / "small"))
    assert done.stdout.strip() == "100", done.stderr[-1000:]


@pytest.mark.process
@pytest.mark.parametrize("kind", sorted(SPECIALS))
def test_env_diff_of_a_fifo_device_or_huge_snapshot_file_is_one_line_in_bounded_time(tmp_path: Path, kind: str) -> None:
    # the last file read without the bounded reader (issue 30): `onnxmon env diff FILE.json`
    path = tmp_path / "snapshot.json"
    SPECIALS[kind](path)
    done = run_capped(
        "import sys\nfrom monitor import cli\nsys.exit(cli.main(sys.argv[1:]))", "env", "diff", str(path), "current"
    )
    assert done.returncode == 2, done.stdout + done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert str(path) in line and "cannot read a JSON snapshot" in line and "Traceback" not in done.stderr


# --- numbers no reader can hold (issue 42 #1) ---------------------------------------------------------

OUT_OF_RANGE = {"400 digits": "1" + "0" * 400, "5000 digits": "9" * 5000, "1e400": "1e400"}


@pytest.mark.process
@pytest.mark.parametrize("number", sorted(OUT_OF_RANGE))
@pytest.mark.parametrize("reader", ["baseline.json", "polygraphy", "promotions"])
def test_a_number_no_reader_can_hold_in_a_baseline_or_polygraphy_file_is_one_error(
    tmp_path: Path, reader: str, number: str
) -> None:
    where, call = READERS[reader]
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"id": "b1", "benchset_version": ' + OUT_OF_RANGE[number] + "}\n")
    code = f"""
        import sys
        from pathlib import Path
        from monitor.errors import MonitorError
        try:
            {call.replace(chr(10), chr(10) + " " * 12)}
        except MonitorError as exc:
            print("refused:", exc)
    """
    done = run_capped(code, str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stdout
    assert said.startswith("refused:") and str(path) in said and "out of" in said and "range" in said, said


@pytest.mark.parametrize("number", sorted(OUT_OF_RANGE))
def test_a_real_baseline_with_a_number_no_reader_can_hold_is_one_line_naming_its_file(
    configured: Workspace, number: str
) -> None:
    from tests.conftest import onnxmon

    (meta,) = (configured.root / "baselines" / "clf").glob("*/baseline.json")
    kept = meta.read_text()
    version = f'"benchset_version": {json.loads(kept)["benchset_version"]}'
    assert version in kept
    meta.write_text(kept.replace(version, f'"benchset_version": {OUT_OF_RANGE[number]}'))
    try:
        done = onnxmon("baseline", "list", "clf", "-c", str(configured.config_file))
    finally:
        meta.write_text(kept)
    assert done.exit_code == 2, done.output[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert str(meta) in line and "cannot read baseline metadata" in line and "out of" in line, line


@pytest.mark.process
def test_env_diff_of_a_snapshot_file_with_a_number_no_float_holds_is_one_line(tmp_path: Path) -> None:
    from monitor.runtime import envsnap

    path = tmp_path / "snapshot.json"
    document = envsnap.capture(load_cuda_libs=False).to_dict()
    path.write_text(json.dumps({**document, "captured_at": 10**400}))
    done = run_capped(
        "import sys\nfrom monitor import cli\nsys.exit(cli.main(sys.argv[1:]))", "env", "diff", str(path), "current"
    )
    assert done.returncode == 2, done.stdout + done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert str(path) in line and "out of range" in line and "Traceback" not in done.stderr
