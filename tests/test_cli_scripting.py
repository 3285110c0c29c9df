"""The command line as scripts use it: global options anywhere, ``-o json`` everywhere, TSV when piped, help.

The tests walk the whole typer app, so a command added later is covered without touching this
file: it must document every parameter, accept ``-o``/``--json`` when it prints, and have an
entry in ``ARGS`` (the arguments it is run with here), or a test says which command is missing.
Everything runs for real: a workspace with an ONNX model, a baseline captured by ONNX Runtime
and a SQLite store written by ``onnxmon check``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main

from monitor import cli
from monitor.cli import tree
from tests import inprocess, modelzoo
from tests.conftest import onnxmon
from tests.workspace import Workspace


def reject(token: str) -> Any:
    raise ValueError(f"non-standard JSON token {token}")


def strict(text: str) -> Any:
    """``json.loads`` that refuses NaN/Infinity tokens, as jq and browsers do."""
    return json.loads(text, parse_constant=reject)


@dataclass
class Setup:
    ws: Workspace
    baseline_id: str
    fingerprint: str

    @property
    def config(self) -> str:
        return str(self.ws.config_file)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    """A workspace with model ``clf``: a baseline captured and promoted, one check recorded (in this process)."""
    ws = Workspace(tmp_path_factory.mktemp("ws"))
    ws.add_model("clf", modelzoo.classifier())
    ws.write()
    made = inprocess.capture_and_check(ws, "clf")
    return Setup(ws, made.baseline_id, str(made.result.environment_fingerprint))


# The arguments each printing command runs with here ({config}, {baseline}, {model_file} filled in).
ARGS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("add",): ("{model_file}", "--name", "added", "--replace", "-c", "{fresh_config}"),  # own config; again: replaced
    ("baseline", "capture"): ("clf", "-c", "{config}"),
    ("baseline", "history"): ("clf", "-c", "{config}"),
    ("baseline", "import"): ("clf", "{npz}", "-c", "{config}"),
    ("baseline", "list"): ("clf", "-c", "{config}"),
    ("baseline", "promote"): ("{baseline}", "-c", "{config}"),
    ("baseline", "show"): ("{baseline}", "-c", "{config}"),
    ("benchset", "create"): ("clf-bench", "-c", "{config}"),
    ("benchset", "import"): ("mine", "{npz_input}", "-c", "{config}"),
    ("benchset", "list"): ("-c", "{config}"),
    ("benchset", "verify"): ("clf-bench", "-c", "{config}"),
    ("check",): ("clf", "--no-store", "-c", "{config}"),
    ("config", "reference"): (),
    ("config", "show"): ("-c", "{config}"),
    ("config", "from-triton"): ("{triton_repo}",),
    ("config", "validate"): ("-c", "{config}"),
    ("db", "current"): ("-c", "{config}"),
    ("db", "upgrade"): ("-c", "{config}"),
    ("diagnose",): ("clf", "--no-store", "-c", "{config}"),
    ("diff-model",): ("{model_file}", "{model_file}"),
    ("env", "diff"): ("-c", "{config}"),
    ("env", "show"): (),
    ("fleet",): ("-c", "{config}"),
    ("history",): ("clf", "-c", "{config}"),
    ("incident", "list"): ("-c", "{config}"),
    ("incident", "note"): ("{run}", "--cause", "unknown", "--text", "noted by the scripting test", "-c", "{config}"),
    ("incident", "show"): ("{incident}", "-c", "{config}"),
    ("localize",): ("clf", "-c", "{config}"),
    # this interpreter as its own candidate: the same stack, so every model is go
    ("rehearse",): ("clf", "--python", "{python}", "--no-store", "-c", "{config}"),
    ("lint",): ("{model_file}",),
    ("sqnr",): ("clf", "--float", "{model_file}", "-c", "{config}"),
    ("coverage",): ("clf", "-c", "{config}"),  # not QDQ: exit 3, the empty coverage printed
    ("calibrate",): ("clf", "--method", "MinMax", "-c", "{config}"),
}
# The commands that run their model in a worker or child process (the rest run in this one: the fast tier).
STARTS_A_PROCESS = {("add",), ("baseline", "capture"), ("check",), ("diagnose",), ("localize",), ("rehearse",)}
NOT_PRINTING = {("serve",): "a daemon: it logs (--log-format json) instead of printing a result"}
# Printing commands whose run needs more than this module's workspace; their -o json is run there.
RUN_ELSEWHERE = {
    ("reference", "torch"): "needs torch and a factory: tests/test_torchref.py runs it with -o yaml",
    ("benchset", "stage"): "needs a set declared imported: tests/test_api_traffic.py runs it with -o yaml and json",
    ("benchset", "promote"): "needs staged samples: tests/test_api_traffic.py runs it with -o yaml and json",
}
EXIT_CODES = {0, 1, 3}  # 1: drift or a difference, 3: could not measure (sqnr of a non-QDQ model)


def leaves() -> list[tuple[tuple[str, ...], Any]]:
    cli._register()
    root = typer.main.get_command(cli.app)
    return [(path, c) for path, c in tree.walk(root) if path and not isinstance(getattr(c, "commands", None), dict)]


def fill(setup: Setup, args: tuple[str, ...], tmp: Path) -> list[str]:
    import numpy as np

    from monitor.files import baselines

    baseline = baselines.get(setup.ws.settings().store.baselines_dir, setup.baseline_id)
    outputs = []
    for sample in range(baseline.meta.sample_count):  # one .npz of outputs per benchmark sample
        outputs.append(str(tmp / f"outputs{sample}.npz"))
        np.savez(outputs[-1], **baseline.sample_outputs(sample))
    np.savez(tmp / "input.npz", x=np.zeros((1, 4), np.float32))
    values = {
        "config": setup.config,
        "baseline": setup.baseline_id,
        "model_file": str(setup.ws.root / "models" / "clf.onnx"),
        "npz_input": str(tmp / "input.npz"),
        "fresh_config": str(tmp / "added.yaml"),
        "python": sys.executable,
    }
    if "{triton_repo}" in args:  # one ONNX Runtime model in a Triton model repository
        folder = tmp / "triton" / "clf"
        (folder / "1").mkdir(parents=True, exist_ok=True)
        shutil.copy(values["model_file"], folder / "1" / "model.onnx")
        (folder / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\noptimization { graph: { level: 1 } }\n')
        values["triton_repo"] = str(tmp / "triton")
    if "{run}" in args or "{incident}" in args:
        values["run"] = str(_a_run(setup))
    if "{incident}" in args:
        noted = onnxmon(
            "incident", "note", values["run"], "--cause", "unknown", "--text", "t", "-o", "json", "-c", setup.config
        )
        assert noted.exit_code == 0, noted.output
        values["incident"] = str(strict(noted.stdout)["id"])
    filled: list[str] = []
    for arg in args:
        filled += outputs if arg == "{npz}" else [arg.format(**values)]
    return filled


def _a_run(setup: Setup) -> int:
    """The id of the check the fixture recorded (``history`` shows ids)."""
    shown = onnxmon("history", "clf", "-o", "json", "-c", setup.config)
    assert shown.exit_code == 0, shown.output
    runs = [item["id"] for item in strict(shown.stdout) if item["kind"] == "run"]
    assert runs, shown.stdout
    return int(runs[0])


def test_every_command_documents_every_parameter_without_python_types() -> None:
    undocumented, typed = [], []
    for path, command in [(p, c) for p, c in tree.walk(typer.main.get_command(cli.app)) if p]:
        for param in command.params:
            if not (getattr(param, "help", None) or "").strip():
                undocumented.append(f"onnxmon {' '.join(path)} {param.name}")
        shown = onnxmon(*path, "--help")
        assert shown.exit_code == 0, shown.output
        typed += [
            f"onnxmon {' '.join(path)}: {t}"
            for t in re.findall(r"<(?:bool|str|int|float|list\[.*?\]|Path)>", shown.stdout)
        ]
    assert not undocumented, "parameters without help:\n" + "\n".join(undocumented)
    assert not typed, "help shows Python types:\n" + "\n".join(typed)


def test_every_printing_command_takes_dash_o_dash_dash_json_and_dash_c() -> None:
    missing = []
    for path, command in leaves():
        if path in NOT_PRINTING:
            continue
        options = {opt for p in command.params for opt in getattr(p, "opts", [])}
        if not {"-o", "--output", "--json", "-c", "--config"} <= options:
            missing.append(" ".join(path))
        if path not in ARGS and path not in RUN_ELSEWHERE:
            missing.append(f"{' '.join(path)} (no entry in tests/test_cli_scripting.py ARGS)")
    assert not missing, "commands without -o/--output, --json and -c/--config:\n" + "\n".join(missing)


def as_run(path: tuple[str, ...], *values: Any) -> Any:
    """``pytest.param(path, *values)``, marked ``process`` when the command starts one (``STARTS_A_PROCESS``)."""
    return pytest.param(path, *values, marks=[pytest.mark.process] if path in STARTS_A_PROCESS else [])


@pytest.mark.parametrize("path", [as_run(path) for path in sorted(ARGS)], ids=" ".join)
def test_dash_o_json_prints_strict_json_on_every_printing_command(
    setup: Setup, path: tuple[str, ...], tmp_path: Path
) -> None:
    result = onnxmon(*path, *fill(setup, ARGS[path], tmp_path), "-o", "json")
    assert result.exit_code in EXIT_CODES, result.output
    strict(result.stdout)  # the whole of stdout is one JSON document


@pytest.mark.parametrize("path", [("baseline", "list"), ("history",), ("config", "validate")], ids=" ".join)
def test_dash_o_json_before_the_command_and_yaml_give_the_same_data(
    setup: Setup, path: tuple[str, ...], tmp_path: Path
) -> None:
    import yaml

    args = fill(setup, ARGS[path], tmp_path)
    before = onnxmon("-o", "json", *path, *args)
    after = onnxmon(*path, *args, "--json")
    as_yaml = onnxmon(*path, *args, "-o", "yaml")
    assert before.exit_code == after.exit_code == as_yaml.exit_code == 0, before.output + after.output
    assert strict(before.stdout) == strict(after.stdout) == yaml.safe_load(as_yaml.stdout)


def test_dash_c_works_before_and_after_the_subcommand_and_after_wins(setup: Setup, tmp_path: Path) -> None:
    before = onnxmon("-c", setup.config, "baseline", "list", "clf", "-o", "json")
    after = onnxmon("baseline", "list", "clf", "-o", "json", "-c", setup.config)
    both = onnxmon("-c", str(tmp_path / "missing.yaml"), "baseline", "list", "clf", "-o", "json", "-c", setup.config)
    assert before.exit_code == after.exit_code == both.exit_code == 0, before.output + after.output + both.output
    ids = [b["id"] for b in strict(before.stdout)]
    assert setup.baseline_id in ids and strict(after.stdout) == strict(before.stdout) == strict(both.stdout)
    wrong = onnxmon("-c", str(tmp_path / "missing.yaml"), "config", "validate")
    assert wrong.exit_code == 2 and "missing.yaml" in wrong.output


def test_an_unknown_output_format_is_a_usage_error(setup: Setup) -> None:
    for argv in (("-o", "xml", "config", "validate", "-c", setup.config), ("config", "validate", "-o", "xml")):
        result = onnxmon(*argv)
        assert result.exit_code == 2 and "table | json | yaml | wide" in result.output


def test_a_table_is_tab_separated_when_stdout_is_not_a_terminal(setup: Setup) -> None:
    result = onnxmon("baseline", "list", "clf", "-c", setup.config)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert not re.search("[│┃━─┏┡└]", result.stdout), "no box drawing in a pipe"
    header = lines[0].split("\t")
    assert header[:3] == ["", "id", "created"]
    rows = [line.split("\t") for line in lines[1:]]
    ours = next(r for r in rows if r[1] == setup.baseline_id)  # the full id, pasteable
    assert ours[0] == "*" and len(ours) == len(header)
    wide = onnxmon("baseline", "list", "clf", "-c", setup.config, "-o", "wide").stdout.splitlines()
    assert setup.fingerprint in wide[1].split("\t"), "wide: the 64-hex fingerprint"


@pytest.mark.parametrize("digits", [12, 16, 64])
def test_env_diff_finds_every_fingerprint_length_onnxmon_prints(setup: Setup, digits: int) -> None:
    prefix = setup.fingerprint[:digits]
    result = onnxmon("env", "diff", prefix, setup.fingerprint, "-o", "json", "-c", setup.config)
    assert result.exit_code == 0, result.output
    data = strict(result.stdout)
    assert data["a"] == data["b"] == setup.fingerprint and data["same_fingerprint"] is True


def test_env_diff_alone_is_the_active_baselines_environment_against_current(setup: Setup) -> None:
    from monitor.files import baselines

    result = onnxmon("env", "diff", "-o", "json", "-c", setup.config)
    assert result.exit_code in (0, 1), result.output
    meta = json.loads(
        (
            baselines.get(setup.ws.settings().store.baselines_dir, setup.baseline_id).directory / "baseline.json"
        ).read_text()
    )
    assert strict(result.stdout)["a"] == meta["environment"]["fingerprint"]


def test_env_diff_of_an_unknown_fingerprint_says_what_it_looked_for(setup: Setup) -> None:
    result = onnxmon("env", "diff", "0000deadbeef", "-c", setup.config)
    message = result.stderr  # the one `onnxmon: error:` line
    assert result.exit_code == 2 and "0000deadbeef" in message and "fingerprint" in message


def test_baseline_history_lists_a_baseline_on_disk_only_and_says_why(setup: Setup) -> None:
    from monitor import capture
    from monitor.config.plan import plan_for

    on_disk_only = capture.capture_baseline(plan_for(setup.ws.settings(), "clf"))  # not through the CLI: no store row
    result = onnxmon("baseline", "history", "clf", "-o", "json", "-c", setup.config)
    assert result.exit_code == 0, result.output
    rows = {r["baseline_id"]: r for r in strict(result.stdout)}
    assert set(rows) == set(os.listdir(setup.ws.root / "baselines" / "clf")) - {"ACTIVE", "promotions.jsonl"}
    assert rows[setup.baseline_id]["recorded"] == "disk+store" and rows[setup.baseline_id]["active"] is True
    assert rows[on_disk_only.id]["recorded"] == "disk" and "store has not recorded it" in rows[on_disk_only.id]["note"]
    table = onnxmon("baseline", "history", "clf", "-c", setup.config).stdout
    assert on_disk_only.id in table.split()  # whole, never cut


def test_shell_completion_is_offered() -> None:
    shown = onnxmon("--help")
    assert "--install-completion" in shown.stdout and "--show-completion" in shown.stdout


RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z$")


@pytest.mark.process
def test_timestamps_in_cli_json_are_rfc3339_utc(setup: Setup) -> None:
    (checked,) = strict(onnxmon("check", "clf", "--no-store", "-o", "json", "-c", setup.config).stdout)
    history = strict(onnxmon("history", "clf", "-o", "json", "-c", setup.config).stdout)
    stamps = [checked["started_at"], checked["finished_at"], *(i["at"] for i in history)]
    stamps += [i["started_at"] for i in history if i["kind"] == "run"]
    stamps += [
        b["created_at"] for b in strict(onnxmon("baseline", "list", "clf", "-o", "json", "-c", setup.config).stdout)
    ]
    stamps += [strict(onnxmon("env", "show", "-o", "json").stdout)["captured_at"]]
    stamps += [b["created_at"] for b in strict(onnxmon("benchset", "list", "-o", "json", "-c", setup.config).stdout)]
    promoted = strict(onnxmon("baseline", "history", "clf", "-o", "json", "-c", setup.config).stdout)
    stamps += [b["active_from"] for b in promoted if b["active_from"]] + [b["created_at"] for b in promoted]
    assert len(stamps) >= 4 and all(RFC3339_UTC.match(s) for s in stamps), stamps


def test_a_bad_log_level_or_format_is_a_usage_error_and_json_logs_lift_the_check_fields(setup: Setup) -> None:
    import io
    import logging

    from monitor.cli import logs
    from monitor.results import CheckResult, Verdict
    from monitor.sinks.log import LogSink

    assert cli.main(["serve", "--log-level", "loud", "-c", setup.config]) == 2
    assert cli.main(["serve", "--log-format", "xml", "-c", setup.config]) == 2
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        logs.configure("info", "json", stream)
        logging.getLogger("alembic.runtime.migration").info("Context impl SQLiteImpl.")
        LogSink(logging.getLogger("onnxmon.results")).write(CheckResult("clf", Verdict.PASS, 1.0e9, 1.0e9 + 2))
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("alembic").setLevel(logging.NOTSET)
    (line,) = [strict(text) for text in stream.getvalue().splitlines()]  # alembic's INFO is quiet
    assert line["model"] == "clf" and line["verdict"] == "pass" and line["event"] == "check"
    assert RFC3339_UTC.match(line["time"]), line["time"]


@pytest.mark.database
def test_lookups_against_an_unreachable_store_say_so_without_the_password(setup: Setup, tmp_path: Path) -> None:
    settings = yaml_config(setup, tmp_path, "postgresql+psycopg://onnxmon:hunter2@127.0.0.1:1/nope")
    missing = onnxmon("env", "diff", "0123456789abcdef", "-c", settings)
    assert missing.exit_code == 3, "could not measure: the store is down"
    assert "hunter2" not in missing.stderr and "127.0.0.1:1" in missing.stderr
    on_disk = onnxmon("env", "diff", setup.fingerprint[:16], setup.fingerprint, "-o", "json", "-c", settings)
    assert on_disk.exit_code == 0, "the baseline on disk still knows its fingerprint"
    listed = onnxmon("baseline", "history", "clf", "-o", "json", "-c", settings)
    assert listed.exit_code == 0, listed.output
    rows = strict(listed.stdout)
    assert rows and all("store not read" in r["note"] and "hunter2" not in r["note"] for r in rows)


def yaml_config(setup: Setup, tmp_path: Path, url: str) -> str:
    """The workspace's config with another store URL (same models, baselines and benchsets)."""
    import yaml

    data = yaml.safe_load(setup.ws.config_file.read_text())
    data["store"] = {**data["store"], "url": url}
    for key in ("baselines_dir", "benchsets_dir"):
        data["store"][key] = str(setup.ws.root / data["store"][key])
    for model in data["models"]:
        model["path"] = str(setup.ws.root / model["path"])
    path = tmp_path / "down.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_tsv_cells_never_split_a_row() -> None:
    from rich.text import Text

    from monitor.cli import common, output

    table = common.PlainTable("name", "note")
    table.add_row("a\tb", Text("line one\nline two"))
    table.add_row("[/]odd", "")
    assert output.tsv(table) == "name\tnote\na b\tline one line two\n[/]odd\t\n"


@pytest.mark.process
def test_bash_completion_offers_subcommands_and_options() -> None:
    import subprocess
    import sys

    onnxmon = str(Path(sys.executable).parent / "onnxmon")
    script = subprocess.run([onnxmon, "--show-completion", "bash"], capture_output=True, text=True, timeout=60)
    assert script.returncode == 0 and "_ONNXMON_COMPLETE=complete_bash" in script.stdout
    env = {**os.environ, "_ONNXMON_COMPLETE": "complete_bash", "COMP_CWORD": "2"}
    words = subprocess.run(
        [onnxmon], env=env | {"COMP_WORDS": "onnxmon baseline "}, capture_output=True, text=True, timeout=60
    ).stdout.split()
    assert {"capture", "promote", "history"} <= set(words)
    options = subprocess.run(
        [onnxmon], env=env | {"COMP_WORDS": "onnxmon history m -", "COMP_CWORD": "3"}, capture_output=True, text=True
    ).stdout.split()
    assert {"-o", "--output", "--json", "-c", "--config"} <= set(options)


def test_a_terminal_table_at_80_columns_wraps_ids_and_never_cuts_them(setup: Setup) -> None:
    from rich.console import Console

    from monitor.cli import baseline_history

    entries = baseline_history.collect(setup.ws.settings(), "clf")
    console = Console(width=80, record=True, force_terminal=True, color_system=None)
    console.print(baseline_history.table(entries, wide=True))
    text = console.export_text()
    assert "…" not in text
    id_column = "".join(line.split("│")[2].strip() for line in text.splitlines() if line.count("│") > 3)
    assert all(e.baseline_id in id_column for e in entries), "each id, whole, reads down its column"


def on_terminal(ws: Workspace, *argv: str, columns: int = 80, raw: bool = False) -> str:
    """What ``onnxmon ARGV`` shows on a real terminal (a pty) ``columns`` wide, escapes removed unless ``raw``."""
    import fcntl
    import pty
    import struct
    import subprocess
    import termios

    from tests.stacks import child_env

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = child_env() | {"COLUMNS": str(columns), "LINES": "50", "TERM": "xterm"}
    onnxmon = Path(sys.executable).parent / "onnxmon"
    process = subprocess.Popen(
        [str(onnxmon), *argv, "-c", str(ws.config_file)], stdout=follower, stderr=follower, cwd=ws.root, env=env
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=300) in (0, 1), b"".join(chunks).decode()
    if raw:
        return b"".join(chunks).decode()
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode()).replace("\r", "")


@pytest.mark.process
@pytest.mark.parametrize(
    "command",
    [("check", "clf", "--no-store"), ("baseline", "history", "clf"), ("baseline", "list", "clf"), ("incident", "list")],
    ids=lambda c: " ".join(c[:2]),
)
def test_a_table_on_an_80_column_terminal_shows_every_column_within_the_width(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    # before: rich cropped what did not fit at the right edge (`baseline history` lost its recorded
    # and note columns, with no sign they were there) and folded a cause code in two; the columns a
    # narrow terminal leaves out on purpose (NARROW_DROPS: -o wide and JSON have them) are not asked for
    from monitor.cli import baseline_history, check_cmd

    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier())
    ws.write()
    config = str(ws.config_file)
    assert onnxmon("baseline", "capture", "clf", "--promote", "-c", config).exit_code == 0
    assert onnxmon("check", "clf", "-c", config).exit_code == 0
    text = "ORT 1.20 fused LayerNorm differently; the owner re-measured accuracy and signed off the new numbers"
    noted = onnxmon("incident", "note", "1", "--cause", "export_training_mode", "--text", text, "-c", config)
    assert noted.exit_code == 0, noted.output
    dropped = {"check": check_cmd.NARROW_DROPS, "baseline": baseline_history.NARROW_DROPS}.get(command[0], ())
    piped = onnxmon(*command, "-c", config).stdout
    headers = [h for h in piped.splitlines()[0].split("\t") if h and h not in dropped]
    screen = on_terminal(ws, *command)
    lines = screen.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines), screen
    words = " ".join(lines).split()
    for header in headers:
        assert all(word in words for word in header.split()), (header, screen)
    if command[0] == "incident":
        assert "export_training_mode" in words, f"a cause code is never split:\n{screen}"


@pytest.mark.process
def test_a_promotion_note_with_a_terminal_escape_is_shown_not_obeyed_by_the_history_table(tmp_path: Path) -> None:
    # before: history's event rows are styled Text cells, which skipped terminal.safe: a note's ESC[2J
    # cleared the on-call engineer's screen (piped TSV showed it escaped)
    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier(), count=2)
    ws.write()
    config = str(ws.config_file)
    assert onnxmon("baseline", "capture", "clf", "-q", "-c", config).exit_code == 0
    captured = onnxmon("baseline", "capture", "clf", "-o", "json", "-c", config)
    candidate = strict(captured.stdout)["id"]
    promoted = onnxmon("baseline", "promote", candidate, "--note", "fine\x1b[2J\x1b]0;pwned\x07", "-c", config)
    assert promoted.exit_code == 0, promoted.output
    screen = on_terminal(ws, "history", "clf", columns=200, raw=True)
    assert "\x1b[2J" not in screen and "\x1b]0;" not in screen, repr(screen)
    assert "\\x1b[2J" in screen, "the escape is shown, written out"
