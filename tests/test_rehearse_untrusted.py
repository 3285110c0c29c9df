"""``onnxmon rehearse`` treats its candidate as untrusted: bounded output, a whole-session kill, vetted answers.

The candidates here are real interpreters of a kind an attacker (or a broken image) could hand over: a
Python script that answers the probe by running this environment's interpreter, and answers ``check``
by running the real check there and then doing something else with it: printing another model's
pass, dropping the outputs, printing 64 MiB, leaving a grandchild (in its own session) holding the
pipe, writing a 400-digit time, nesting its details 3,000 deep. Every one must end as one line (exit 3
for the probe, a NO-GO with what was expected and what came back for a check), in bounded time, with
nothing it started left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.rehearse import candidate, child
from monitor.rehearse.rehearsal import rehearse
from monitor.rehearse.report import Report
from tests import modelzoo
from tests.stacks import child_env, current_stack
from tests.workspace import Workspace

pytestmark = [pytest.mark.process, pytest.mark.slow]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("untrusted"))
    ws.add_model("clf", modelzoo.classifier(), count=4, timeout="20s")
    ws.add_model("other", modelzoo.classifier(seed=1), count=3, timeout="20s")
    ws.write()
    for model in ("clf", "other"):
        done = subprocess.run(
            [str(current_stack().onnxmon), "baseline", "capture", model, "--quiet", "-c", str(ws.config_file)],
            cwd=ws.root, env=child_env(), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    return ws


@pytest.fixture(scope="module")
def answers(workspace: Workspace) -> dict[str, str]:
    """Each model's real answer to ``check -o json`` on this stack, in a file: what a fake candidate starts from."""
    files = {}
    for model in ("clf", "other"):
        done = subprocess.run(
            [str(current_stack().onnxmon), "check", model, "--no-store", "-o", "json",
             "-c", str(workspace.config_file)],
            cwd=workspace.root, env=child_env(), capture_output=True, timeout=300, check=True,
        )  # fmt: skip
        path = workspace.root / f"{model}.answer.json"
        path.write_bytes(done.stdout)
        files[model] = str(path)
    return files


def fake_python(
    tmp_path: Path, name: str, on_check: str = "", on_probe: str = "", answers: dict[str, str] | None = None
) -> Path:
    """An "interpreter": the probe run by the real one, ``on_probe`` first; ``check`` answered, ``on_check`` after.

    The answer to ``check`` is the real check's, run then, or with ``answers`` a model's real answer read from
    its file, stamped with the time now (``answer(model)``). ``on_check`` sees ``args`` (the check's command
    line), ``done.returncode`` (the exit status), ``found`` (the answer) and ``raw`` (what is printed: ``None``
    prints ``found``), and may change them."""
    script = tmp_path / name

    def block(code: str, indent: str) -> str:
        return textwrap.indent(textwrap.dedent(code).strip() or "pass", indent)

    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, subprocess, sys, time, types\n"
        f"REAL, ANSWERS = {sys.executable!r}, {answers!r}\n"
        "args = sys.argv[1:]\n"
        'if "check" not in args:\n'
        f"{block(on_probe, '    ')}\n"
        "    os.execv(REAL, [REAL, *args])\n"
        "def answer(model):\n"
        "    found = json.load(open(ANSWERS[model]))\n"
        '    found[0]["started_at"] = found[0]["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())\n'
        "    return found\n"
        "raw = None\n"
        "if ANSWERS:\n"
        '    done, found = types.SimpleNamespace(returncode=0), answer(args[args.index("check") + 1])\n'
        "else:\n"
        "    done = subprocess.run([REAL, *args], capture_output=True, check=False)\n"
        "    found = json.loads(done.stdout)\n"
        f"{block(on_check, '')}\n"
        "sys.stdout.buffer.write(json.dumps(found).encode() if raw is None else raw)\n"
        "sys.stdout.flush()\n"
        "sys.exit(done.returncode)\n"
    )
    script.chmod(0o755)
    return script


def replayed(ws: Workspace, python: Path, model: str = "clf") -> dict[str, object]:
    """``rehearse`` of ``model`` on ``python`` (probe skipped): the report's model entry, and its text."""
    stack = candidate.Candidate(python, "3", "x", "x", ("CPUExecutionProvider",))
    report, _ = rehearse(ws.settings(), str(ws.config_file), stack, [model], None)
    assert isinstance(report, Report)
    (entry,) = report.to_dict()["models"]
    return {**entry, "text": report.text()}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


def wait_gone(pid: int, within_s: float = 5.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    """A file the fake candidates write the pids of what they leave behind to; anything alive after is killed."""
    path = tmp_path / "pids"
    yield path
    for line in path.read_text().split() if path.exists() else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line), signal.SIGKILL)


def test_an_honest_candidate_is_still_go(workspace: Workspace, tmp_path: Path) -> None:
    entry = replayed(workspace, fake_python(tmp_path, "honest"))
    assert entry["go"] is True, entry


# --- #7: answers are checked against the plan ------------------------------------------------------------


def test_another_models_pass_is_no_go_for_the_model_asked(
    workspace: Workspace, answers: dict[str, str], tmp_path: Path
) -> None:
    """The candidate checks ``other`` when asked ``clf``, and says so, or relabels it as ``clf``."""
    honest = fake_python(tmp_path, "honest-other", on_check='found = answer("other")', answers=answers)
    entry = replayed(workspace, honest)
    assert entry["go"] is False and entry["verdict"] == "error"
    assert "asked for model 'clf', the answer is about 'other'" in str(entry["why"]), entry["why"]
    relabel = 'found = answer("other")\nfound[0]["model"] = "clf"'
    relabelled = fake_python(tmp_path, "relabel", on_check=relabel, answers=answers)
    entry = replayed(workspace, relabelled)
    assert entry["go"] is False and "expected a comparison with production's active baseline clf-" in str(
        entry["why"]
    ), entry["why"]
    assert "NO-GO  clf" in str(entry["text"])


def test_a_pass_with_no_outputs_or_too_few_samples_is_no_go(
    workspace: Workspace, answers: dict[str, str], tmp_path: Path
) -> None:
    entry = replayed(workspace, fake_python(tmp_path, "empty", on_check='found[0]["outputs"] = []', answers=answers))
    assert entry["go"] is False
    assert "expected outputs ['logits', 'prob'] (the baseline's), the answer has []" in str(entry["why"]), entry["why"]
    entry = replayed(workspace, fake_python(tmp_path, "few", on_check='found[0]["sample_count"] = 1', answers=answers))
    assert entry["go"] is False
    assert "expected a pass on the baseline's 4 samples, the answer counts 1" in str(entry["why"]), entry["why"]


def test_a_pass_with_a_failed_output_or_a_failing_exit_is_no_go(
    workspace: Workspace, answers: dict[str, str], tmp_path: Path
) -> None:
    entry = replayed(
        workspace,
        fake_python(tmp_path, "mixed", on_check='found[0]["outputs"][1]["verdict"] = "fail"', answers=answers),
    )
    assert entry["go"] is False and "the answer says pass with outputs ['prob'] not passed" in str(entry["why"])
    entry = replayed(workspace, fake_python(tmp_path, "exit1", on_check="done.returncode = 1", answers=answers))
    assert entry["go"] is False and "the answer says pass, but the check exited 1" in str(entry["why"])


# --- #8: parse errors are no-go lines, never tracebacks ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "on_check", "said"),
    [
        ("huge-time", 'raw = json.dumps(found).replace(json.dumps(found[0]["started_at"]), "9" * 400).encode()',
         "an integer of 400 digits"),
        ("deep", 'found[0]["details"] = "@"\nraw = json.dumps(found).replace(\'"@"\', \'{"a":\' * 3000 + "1"'
         ' + "}" * 3000).encode()', "JSON nested deeper than 64 levels"),
        ("deep-900", 'found[0]["details"] = "@"\nraw = json.dumps(found).replace(\'"@"\', \'[\' * 900 + "1"'
         ' + "]" * 900).encode()', "JSON nested deeper than 64 levels"),
        ("far-time", 'found[0]["started_at"] = 1e300', "started_at: expected a time within the replay"),
        ("old-time", 'found[0]["started_at"] = "2001-01-01T00:00:00Z"', "started_at: expected a time within"),
        ("bad-time", 'found[0]["finished_at"] = "soon"', "finished_at: expected an RFC 3339 time, got 'soon'"),
        ("huge-float", 'raw = json.dumps(found).replace(\'"sample_count": 4\', \'"sample_count": 1e999\').encode()',
         "number 1e999 out of range"),
        ("verdict", 'found[0]["verdict"] = "go"', "verdict: 'go' is no Verdict"),
        ("binary", 'raw = b"\\xff\\xfe[{\\x00\\x1b[2J"', "not UTF-8 (byte 0xff at offset 0)"),
        ("fingerprint", 'found[0]["environment"]["fingerprint"] = "0" * 64',
         "environment: fingerprint '0000000000000000"),
        ("snapshot", 'found[0]["environment"] = {"fields": 3}', "environment.fields: expected an object"),
        ("reasonless", 'found[0]["verdict"] = "fail"', "a fail with no reason"),
        ("two", "found = found * 2", "expected a list of one check result, got a list of 2"),
        ("object", "found = found[0]", "expected a list of one check result, got an object"),
    ],
)  # fmt: skip
def test_a_crafted_answer_is_a_no_go_line(
    workspace: Workspace, answers: dict[str, str], tmp_path: Path, name: str, on_check: str, said: str
) -> None:
    entry = replayed(workspace, fake_python(tmp_path, name, on_check=on_check, answers=answers))
    assert entry["go"] is False and entry["verdict"] == "error"
    assert said in str(entry["why"]), entry["why"]
    assert "with an answer onnxmon does not take" in str(entry["why"])


def test_a_crafted_diagnosis_is_a_no_go_line(workspace: Workspace, answers: dict[str, str], tmp_path: Path) -> None:
    """A fail whose diagnosis rests on a basis of "high", or (an older onnxmon's) a confidence of "high":
    the report said it with a ValueError traceback."""
    fail = """
        found[0]["verdict"] = "fail"
        found[0]["reasons"] = [{"code": "atol_rtol", "detail": "x"}]
        found[0]["details"]["diagnosis"] = {"format": 2, "hypotheses": [
            {"cause": "runtime_version", HYPOTHESIS, "evidence": ["onnxruntime 1.20.1 -> 1.32.0"], "fix": "pin it"}
        ]}
        done.returncode = 1
    """
    crafted = fail.replace("HYPOTHESIS", '"basis": "high"')
    entry = replayed(workspace, fake_python(tmp_path, "high", on_check=crafted, answers=answers))
    assert entry["go"] is False and "NO-GO  clf" in str(entry["text"])
    assert "details.diagnosis.hypotheses[0].basis: expected one of" in str(entry["why"]), entry["why"]
    older = fail.replace("HYPOTHESIS", '"confidence": "high"')
    entry = replayed(workspace, fake_python(tmp_path, "older", on_check=older, answers=answers))
    assert "details.diagnosis.hypotheses[0].confidence: expected a number in [0, 1], got 'high'" in str(entry["why"])
    honest = fail.replace("HYPOTHESIS", '"basis": "evidence"')
    entry = replayed(workspace, fake_python(tmp_path, "sure", on_check=honest, answers=answers))
    cause = entry["likely_cause"]
    assert {k: cause[k] for k in ("cause", "basis", "fix")} == {
        "cause": "runtime_version",
        "basis": "evidence",
        "fix": "pin it",
    }, entry
    assert "runtime_version" in cause["summary"] and cause["summary"] in str(entry["text"])


def test_a_candidate_that_exits_zero_saying_nothing_is_no_go(
    workspace: Workspace, answers: dict[str, str], tmp_path: Path
) -> None:
    entry = replayed(
        workspace, fake_python(tmp_path, "mute", on_check='raw = b""\ndone.returncode = 0', answers=answers)
    )
    assert entry["go"] is False and "exited 0 without a result: no output" in str(entry["why"]), entry["why"]


# --- #5: bounded output ------------------------------------------------------------------------------------


def test_a_candidate_that_prints_64_mib_is_cut_at_the_cap(
    workspace: Workspace, answers: dict[str, str], tmp_path: Path
) -> None:
    """It read 2.9 GB in 5.6 s, then MemoryError; 64 MiB here, so the unfixed code finishes to fail the test."""
    flood = fake_python(
        tmp_path, "flood", on_check='raw = b" " * (64 << 20) + json.dumps(found).encode()', answers=answers
    )
    started = time.monotonic()
    entry = replayed(workspace, flood)
    assert entry["go"] is False and "printed more than 8 MiB to stdout" in str(entry["why"]), entry["why"]
    assert time.monotonic() - started < 30


def test_a_probe_answered_with_64_mib_is_cut_at_its_cap(tmp_path: Path) -> None:
    flood = fake_python(tmp_path, "flood-probe", on_probe='sys.stdout.buffer.write(b" " * (64 << 20))')
    with pytest.raises(candidate.CandidateUnusable, match="printed more than 64 KiB to stdout in answer to the probe"):
        candidate.probe(flood)


def test_a_probe_answered_with_endless_stderr_is_cut_at_its_cap(tmp_path: Path) -> None:
    """Only the end of stderr is kept (its last line says why); past 16 MiB the candidate is cut."""
    endless = fake_python(tmp_path, "endless-probe", on_probe="while True:\n    sys.stderr.buffer.write(b'x' * 65536)")
    with pytest.raises(candidate.CandidateUnusable, match="printed more than 16 MiB to stderr in answer to the probe"):
        candidate.probe(endless)


# --- #6: a whole-session kill, bounded waits ---------------------------------------------------------------

_PROBE_WITHIN = """
import sys, time
from monitor.rehearse import candidate
candidate.PROBE_TIMEOUT_S = 20.0
started = time.monotonic()
stack = candidate.probe(sys.argv[1])
print(stack.onnxmon_version, round(time.monotonic() - started, 1))
"""


def test_a_grandchild_in_its_own_session_holding_the_probes_pipe_neither_hangs_it_nor_survives(
    tmp_path: Path, pids: Path
) -> None:
    """The unfixed probe waited for EOF for ever; run in a child of the test, so a hang is a failure here."""
    escape = f"""
        if os.fork() == 0:
            os.setsid()
            open({str(pids)!r}, "a").write(f"{{os.getpid()}}\\n")
            time.sleep(300)
            os._exit(0)
    """
    sneaky = fake_python(tmp_path, "setsid-probe", on_probe=escape)
    probe = subprocess.Popen(
        [sys.executable, "-c", _PROBE_WITHIN, str(sneaky)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, _ = probe.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(probe.pid, signal.SIGKILL)
        probe.communicate()
        pytest.fail("the probe hung on a grandchild that holds its pipe")
    assert probe.returncode == 0, out
    _, seconds = out.split()
    assert float(seconds) < 10, f"the probe took {seconds} s"
    (grandchild,) = [int(p) for p in pids.read_text().split()]
    assert wait_gone(grandchild), f"the grandchild {grandchild} in its own session outlived the probe"


def test_a_check_that_leaves_children_holding_stdout_is_read_at_once_and_they_are_killed(
    workspace: Workspace, answers: dict[str, str], tmp_path: Path, pids: Path
) -> None:
    """One grandchild in the check's group, one in a session of its own: both hold stdout after the check exits."""
    leave = f"""
        for escape in (False, True):
            if os.fork() == 0:
                if escape:
                    os.setsid()
                open({str(pids)!r}, "a").write(f"{{os.getpid()}}\\n")
                time.sleep(300)
                os._exit(0)
    """
    started = time.monotonic()
    entry = replayed(workspace, fake_python(tmp_path, "leaves", on_check=leave, answers=answers))
    elapsed = time.monotonic() - started
    assert entry["go"] is True, entry  # the answer itself is honest
    assert elapsed < 30, f"the replay waited {elapsed:.0f} s for children that hold its stdout"
    left = [int(p) for p in pids.read_text().split()]
    assert len(left) == 2 and all(wait_gone(pid) for pid in left), "a child the candidate left is still running"


def test_a_command_that_ignores_sigterm_and_forks_is_killed_whole_at_its_limit(tmp_path: Path, pids: Path) -> None:
    stubborn = f"""
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for escape in (False, True):
    if os.fork() == 0:
        if escape:
            os.setsid()
        open({str(pids)!r}, "a").write(f"{{os.getpid()}}\\n")
        time.sleep(300)
        os._exit(0)
print("still here", flush=True)
time.sleep(300)
"""
    started = time.monotonic()
    ran = child.run([sys.executable, "-c", stubborn], limit_s=2.0, stdout_cap=1 << 20, stderr_cap=1 << 20)
    assert ran.timed_out and ran.returncode is None and ran.cut == "took over 2 s"
    assert ran.stdout == b"still here\n"
    assert time.monotonic() - started < 2.0 + child.GRACE_S + 3
    left = [int(p) for p in pids.read_text().split()]
    assert len(left) == 2 and all(wait_gone(pid) for pid in left)


def test_an_endless_printer_is_cut_with_its_output_bounded(tmp_path: Path) -> None:
    endless = "import sys\nwhile True:\n    sys.stdout.buffer.write(b'x' * 65536)"
    started = time.monotonic()
    ran = child.run([sys.executable, "-c", endless], limit_s=60, stdout_cap=1 << 20, stderr_cap=1 << 20)
    assert ran.cut == "printed more than 1 MiB to stdout" and len(ran.stdout) <= 1 << 20
    assert time.monotonic() - started < 10


def test_a_rehearsal_through_the_cli_says_no_go_in_one_line(
    workspace: Workspace, answers: dict[str, str], tmp_path: Path
) -> None:
    """End to end: the answer of another model, through ``onnxmon rehearse``: exit 1, no traceback."""
    python = fake_python(tmp_path, "cli-other", on_check='found = answer("other")', answers=answers)
    done = subprocess.run(
        [str(current_stack().onnxmon), "rehearse", "clf", "--python", str(python), "--no-store", "-o", "json",
         "-c", str(workspace.config_file)],
        cwd=workspace.root, env=child_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    (model,) = json.loads(done.stdout)["models"]
    assert model["go"] is False and "the answer is about 'other'" in model["why"]


_RUN_AND_WAIT = """
import sys
from monitor.rehearse import child
child.run([sys.executable, "-c", sys.argv[1]], limit_s=120, stdout_cap=1 << 20, stderr_cap=1 << 20)
"""


def test_ctrl_c_during_a_rehearsal_takes_the_candidates_session_and_its_escapees_down(
    tmp_path: Path, pids: Path
) -> None:
    """SIGINT to the rehearsing process (not to the candidate: it has a session of its own)."""
    spawner = f"""
import os, time
for how in ("group", "session"):
    if os.fork() == 0:
        os.setpgid(0, 0) if how == "group" else os.setsid()
        open({str(pids)!r}, "a").write(f"{{os.getpid()}}\\n")
        time.sleep(300)
        os._exit(0)
time.sleep(300)
"""
    rehearsing = subprocess.Popen([sys.executable, "-c", _RUN_AND_WAIT, spawner], stderr=subprocess.PIPE)
    end = time.monotonic() + 30
    while time.monotonic() < end and len(pids.read_text().split() if pids.exists() else []) < 2:
        time.sleep(0.05)
    left = [int(p) for p in pids.read_text().split()]
    assert len(left) == 2
    rehearsing.send_signal(signal.SIGINT)
    _, err = rehearsing.communicate(timeout=30)
    assert b"KeyboardInterrupt" in err
    assert all(wait_gone(pid) for pid in left), "a process the candidate started outlived Ctrl-C"
