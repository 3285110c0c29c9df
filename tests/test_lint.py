"""The code stays ruff- and mypy-clean: the linters run as part of the test suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPTS = ("gpu-check", "fetch-helm", "ort-venv", "sync-chart-files")


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
            "scripts/ort-venv",
        ),
        ("ruff", "format", "--check", "monitor", "tests", "bench", "examples"),
        ("mypy", "monitor"),
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_the_code_is_lint_clean(command: tuple[str, ...]) -> None:
    result = run(str(BIN / command[0]), *command[1:])
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_boundaries_are_enforced_by_the_linter(tmp_path: Path) -> None:
    offender = ROOT / "monitor" / "_boundary_probe.py"
    offender.write_text("import onnxruntime\nimport sqlalchemy\nimport prometheus_client\n")
    try:
        result = run(str(BIN / "ruff"), "check", "--select", "TID251", str(offender))
    finally:
        offender.unlink()
    assert result.returncode != 0
    for module in ("onnxruntime", "sqlalchemy", "prometheus_client"):
        assert f"`{module}` is banned" in result.stdout
