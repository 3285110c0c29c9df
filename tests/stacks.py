"""Two ONNX Runtime stacks for upgrade tests: this environment's, and an older release's beside it.

``scripts/ort-venv`` builds the second virtual environment (the same interpreter and package
versions, another ``onnxruntime``, this checkout's onnxmon), once, under ``.cache/ort-<version>/``.
Its suite is ``upgrade``: building it needs PyPI; without a network the tests skip, unless CI
lists ``upgrade`` in ``ONNXMON_REQUIRE``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import unavailable

SUITE = "upgrade"
REPO = Path(__file__).resolve().parent.parent
OLDER_ORT = "1.20.1"


@dataclass(frozen=True)
class Stack:
    """One virtual environment: its ONNX Runtime release and its ``onnxmon`` console script."""

    ort_version: str
    python: Path

    @property
    def onnxmon(self) -> Path:
        return self.python.parent / "onnxmon"


def child_env() -> dict[str, str]:
    """This process's environment without ``ONNXMON_*`` (CI's ``ONNXMON_REQUIRE`` would read as config overrides)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ONNXMON_")}


def current_stack() -> Stack:
    """The environment running the tests."""
    import onnxruntime

    python = Path(sys.executable)
    if not (python.parent / "onnxmon").is_file():
        pytest.fail(f"no onnxmon console script next to {python}: install onnxmon into this environment")
    return Stack(str(onnxruntime.__version__), python)


def older_stack(version: str = OLDER_ORT) -> Stack:
    """The older release's environment, built once by ``scripts/ort-venv`` (network) and then reused."""
    command = [sys.executable, str(REPO / "scripts" / "ort-venv"), version]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired:
        unavailable(SUITE, f"scripts/ort-venv {version} took over 10 minutes")
        raise AssertionError("unreachable") from None
    if done.returncode == 3:
        unavailable(SUITE, f"cannot download onnxruntime=={version}: {done.stderr.strip()[-500:]}")
    if done.returncode != 0:
        pytest.fail(f"scripts/ort-venv {version} failed ({done.returncode}):\n{done.stderr}")
    return Stack(version, Path(done.stdout.strip()))
