"""The candidate stack: an interpreter that has onnxmon and the candidate ONNX Runtime, probed before use.

Why a probe: a rehearsal that cannot start on its candidate must say why in one line (exit 3, "could not
measure") before any model runs: a path that is not an interpreter, an interpreter without onnxmon or
onnxruntime, one whose onnxmon is another version than this one (its results would not mean the same).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from monitor import __version__
from monitor.errors import MonitorError
from monitor.rehearse import answer, child

PROBE_TIMEOUT_S = 120.0
MAX_PROBE_BYTES = 64 << 10
"""What the probe may print (its answer is one short line); past it the candidate cannot rehearse."""
MAX_PROBE_STDERR_BYTES = 16 << 20
# ``monitor.cli`` too: the replay runs the candidate's command line, which needs onnxmon's own dependencies
# there (typer, pydantic, ...), not only the two packages; a half-installed candidate is exit 3, not a no-go.
_PROBE = (
    "import json, sys, monitor, monitor.cli, onnxruntime\n"
    "print(json.dumps({'python': sys.version.split()[0], 'onnxmon': monitor.__version__,"
    " 'onnxruntime': onnxruntime.__version__, 'providers': onnxruntime.get_available_providers()}))"
)
_MAIN = "import sys\nfrom monitor.cli import main\nsys.exit(main(sys.argv[1:]))"


class CandidateUnusable(MonitorError):
    """The candidate interpreter cannot run a rehearsal: nothing was measured (exit 3)."""

    exit_code = 3


@dataclass(frozen=True)
class Candidate:
    """A probed candidate interpreter and what it runs."""

    python: Path
    python_version: str
    onnxmon_version: str
    onnxruntime_version: str
    providers: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "python": str(self.python),
            "python_version": self.python_version,
            "onnxmon": self.onnxmon_version,
            "onnxruntime": self.onnxruntime_version,
            "providers": list(self.providers),
        }

    def command(self, *args: str) -> list[str]:
        """``onnxmon ARGS`` run by the candidate interpreter."""
        return [str(self.python), "-c", _MAIN, *args]


def probe(python: str | Path, env: dict[str, str] | None = None) -> Candidate:
    """Ask ``python`` what it runs; ``CandidateUnusable`` naming the reason when it cannot rehearse."""
    path = Path(python)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise CandidateUnusable(f"--python {python}: not an executable file")
    try:
        ran = child.run(
            [str(path), "-c", _PROBE],
            limit_s=PROBE_TIMEOUT_S,
            stdout_cap=MAX_PROBE_BYTES,
            stderr_cap=MAX_PROBE_STDERR_BYTES,
            env=env,
        )
    except OSError as exc:
        raise CandidateUnusable(f"--python {python}: cannot run it: {type(exc).__name__}: {exc}") from None
    if ran.timed_out:
        raise CandidateUnusable(f"--python {python}: no answer to the probe within {PROBE_TIMEOUT_S:g} s")
    if ran.cut is not None:
        raise CandidateUnusable(f"--python {python}: {ran.cut} in answer to the probe")
    if ran.returncode != 0:
        raise CandidateUnusable(
            f"--python {python}: cannot import onnxmon (with its command line) and onnxruntime there"
            f" ({ran.last_line()})"
        )
    found = _probe_answer(python, ran.stdout)
    if found["onnxmon"] != __version__:
        raise CandidateUnusable(
            f"--python {python} has onnxmon {found['onnxmon']}, this is {__version__}: install this onnxmon"
            " there (scripts/ort-venv VERSION makes such an interpreter)"
        )
    providers = found["providers"]
    assert isinstance(providers, list)
    return Candidate(
        python=path,
        python_version=str(found["python"]),
        onnxmon_version=str(found["onnxmon"]),
        onnxruntime_version=str(found["onnxruntime"]),
        providers=tuple(str(p) for p in providers),
    )


def _probe_answer(python: str | Path, stdout: bytes) -> dict[str, object]:
    """The probe's answer (its last line): strings for the versions, a list of strings for the providers."""
    lines = stdout.strip().splitlines()
    try:
        found = answer.parse(lines[-1] if lines else b"")
        if not isinstance(found, dict) or not all(isinstance(found.get(k), str) for k in _VERSIONS):
            raise answer.BadAnswer(f"not an object with the strings {list(_VERSIONS)}")
        providers = found.get("providers")
        if not isinstance(providers, list) or not all(isinstance(p, str) for p in providers):
            raise answer.BadAnswer("no list of providers")
    except answer.BadAnswer:
        raise CandidateUnusable(f"--python {python}: unexpected answer to the probe: {stdout[:200]!r}") from None
    return found


_VERSIONS = ("python", "onnxmon", "onnxruntime")
