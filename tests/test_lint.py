"""The code stays ruff- and mypy-clean: the linters run as part of the test suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPTS = ("gpu-check", "fetch-helm", "fetch-models", "ort-venv", "sync-chart-files", "build-images")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    "command",
    [
        (
            "ruff",
            "check",
            "monitor",
            "tests",
            "bench",
            "examples",
            "scripts/gpu-check",
            "scripts/fetch-helm",
            "scripts/fetch-models",
            "scripts/scenario-table",
            "scripts/ort-venv",
            "scripts/build-images",
            "scripts/gpu-acceptance",
            "scripts/gpu-stage",
            "scripts/drift-study",
            "scripts/drift_measure.py",
            "scripts/sync-chart-files",
        ),
        ("ruff", "format", "--check", "monitor", "tests", "bench", "examples"),
        ("mypy", "monitor"),
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_the_code_is_lint_clean(command: tuple[str, ...]) -> None:
    result = run(str(BIN / command[0]), *command[1:])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("path", "module"),
    [
        ("monitor/check.py", "onnxruntime"),
        ("monitor/compare/outputs.py", "onnxruntime"),
        ("monitor/sinks/database.py", "sqlalchemy"),
        ("monitor/daemon/root.py", "prometheus_client"),
        ("monitor/cli/serve_cmd.py", "fastapi"),
        ("monitor/check.py", "torch"),
        ("monitor/cli/reference_cmd.py", "onnxscript"),
    ],
)
def test_an_import_outside_its_folder_is_refused_by_the_linter(path: str, module: str) -> None:
    result = ruff_probe(path, module)
    assert result.returncode != 0
    assert f"`{module}` is banned" in result.stdout


@pytest.mark.parametrize(
    ("path", "module"),
    [
        ("monitor/runtime/session.py", "onnxruntime"),
        ("monitor/store/repo.py", "sqlalchemy"),
        ("monitor/api/app.py", "fastapi"),
        ("monitor/torchref/factory.py", "torch"),
        ("monitor/torchref/reference.py", "onnxscript"),
    ],
)
def test_an_import_inside_its_folder_is_allowed(path: str, module: str) -> None:
    result = ruff_probe(path, module)
    assert result.returncode == 0, result.stdout


def ruff_probe(path: str, module: str) -> subprocess.CompletedProcess[str]:
    """Ruff's verdict on ``import module`` as if it were ``path``: read from stdin, nothing written into monitor/."""
    return subprocess.run(
        [str(BIN / "ruff"), "check", "--select", "TID251", "--stdin-filename", path, "-"],
        cwd=ROOT,
        input=f"import {module}\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
