"""The candidate stack: an interpreter that has onnxmon and the candidate ONNX Runtime, probed before use.

Why a probe: a rehearsal that cannot start on its candidate must say why in one line (exit 3, "could not
measure") before any model runs: a path that is not an interpreter, an interpreter without onnxmon or
onnxruntime, one whose onnxmon is another version than this one (its results would not mean the same).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from monitor import __version__
from monitor.errors import MonitorError

PROBE_TIMEOUT_S = 120.0
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
        done = _ask([str(path), "-c", _PROBE], env)
    except subprocess.TimeoutExpired:
        raise CandidateUnusable(f"--python {python}: no answer to the probe within {PROBE_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise CandidateUnusable(f"--python {python}: cannot run it: {type(exc).__name__}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise CandidateUnusable(
            f"--python {python}: cannot import onnxmon (with its command line) and onnxruntime there ({last})"
        )
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
        keys = ("python", "onnxmon", "onnxruntime", "providers")
        if not isinstance(found, dict) or not all(k in found for k in keys) or not isinstance(found["providers"], list):
            raise ValueError(f"not an object with {list(keys)}")
    except (ValueError, IndexError):
        raise CandidateUnusable(f"--python {python}: unexpected answer to the probe: {done.stdout[:200]!r}") from None
    if found["onnxmon"] != __version__:
        raise CandidateUnusable(
            f"--python {python} has onnxmon {found['onnxmon']}, this is {__version__}: install this onnxmon"
            " there (scripts/ort-venv VERSION makes such an interpreter)"
        )
    return Candidate(
        python=path,
        python_version=str(found["python"]),
        onnxmon_version=str(found["onnxmon"]),
        onnxruntime_version=str(found["onnxruntime"]),
        providers=tuple(str(p) for p in found["providers"]),
    )


def _ask(command: list[str], env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
    """Run the probe in its own session; past ``PROBE_TIMEOUT_S`` the whole session is killed (a hung
    wrapper script's children too, not only the script) and ``TimeoutExpired`` raised."""
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",  # an interpreter that prints bytes not UTF-8 is answered in one line, as any garbage
        env=env,
        start_new_session=True,
    ) as process:
        try:
            out, err = process.communicate(timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)
