"""The package tree keeps its shape: no import circle, no module over 400 lines, boundaries by folder.

Each rule is checked on the real tree and then shown to bite on a copy of it with one offence added
(a circle, a 401-line module, an onnxruntime import outside ``monitor/runtime/``), so a rule that
silently stopped checking anything would fail here too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.layout import MAX_LINES, Tree

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# Modules everything else may import: they must stay free of third-party packages.
VOCABULARY = ("monitor.results", "monitor.errors", "monitor.jsonsafe", "monitor.bounded")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the ``monitor`` package found under ``root`` (no cache written anywhere)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the package and its config, to break on purpose."""
    shutil.copytree(ROOT / "monitor", tmp_path / "monitor", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def test_no_module_of_monitor_imports_itself_back_through_others() -> None:
    assert Tree(ROOT).circles() == []


def test_no_module_is_longer_than_400_lines() -> None:
    assert Tree(ROOT).oversized() == {}


@pytest.mark.parametrize("module", VOCABULARY)
def test_the_shared_vocabulary_imports_only_the_standard_library(module: str) -> None:
    assert Tree(ROOT).third_party_imports(module) == set()


def test_the_import_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Contracts: \d+ kept, 0 broken", result.stdout)


def test_a_circle_is_found_even_through_a_type_only_import(copy: Path) -> None:
    append(copy / "monitor" / "results.py", "\nif False:\n    from monitor.check import run_check  # noqa: F401\n")
    circles = Tree(copy).circles()
    assert any({"monitor.results", "monitor.check"} <= set(circle) for circle in circles), circles
    result = lint_imports(copy)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and "monitor.results" in result.stdout


def test_a_401_line_module_is_reported(copy: Path) -> None:
    path = copy / "monitor" / "errors.py"
    lines = len(path.read_text().splitlines())
    append(path, "\n" * (MAX_LINES + 1 - lines))
    assert Tree(copy).oversized().get("monitor.errors") == MAX_LINES + 1


def test_an_onnxruntime_import_outside_the_runtime_folder_breaks_the_contract(copy: Path) -> None:
    append(copy / "monitor" / "compare" / "outputs.py", "\nimport onnxruntime  # noqa: E402, F401\n")
    result = lint_imports(copy)
    assert result.returncode != 0
    assert "onnxruntime only under monitor.runtime BROKEN" in result.stdout
    assert "monitor.compare.outputs -> onnxruntime" in result.stdout


def test_a_third_party_import_in_the_vocabulary_is_reported(copy: Path) -> None:
    append(copy / "monitor" / "results.py", "\nimport numpy  # noqa: E402, F401\n")
    assert Tree(copy).third_party_imports("monitor.results") == {"numpy"}


def test_the_architecture_map_names_every_package() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    packages = sorted(
        str(path.parent.relative_to(ROOT)) + "/"
        for path in (ROOT / "monitor").rglob("__init__.py")
        if "migrations" not in path.parts
    )
    missing = [package for package in packages if f"`{package}`" not in text]
    assert missing == [], f"docs/architecture.md does not name {missing}"
