"""A fresh clone with nothing but Python and ``.[dev]``: what a newcomer's first test run meets.

README's second command must pass there with torch absent: the torch suites skip naming torch and
an install line that works from a clone, mypy does not need torch, and ``.ci/run`` runs that same
torch-less check in a fresh venv before it installs anything optional, so CI sees it too.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from monitor.errors import MonitorError
from monitor.torchref import factory
from tests.conftest import TORCH_INSTALL, need_torch

ROOT = Path(__file__).resolve().parents[1]
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def extra(name: str) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [Requirement(r) for r in project["optional-dependencies"][name]]


def test_without_torch_the_reference_says_how_to_install_it_from_a_clone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError, installed or not
    with pytest.raises(MonitorError) as caught:
        factory.import_torch()
    assert "pip install -e '.[torch]'" in str(caught.value)
    assert "onnxmon[torch]" not in str(caught.value)


@pytest.mark.parametrize(
    "missing",
    [("torch", "onnxscript"), ("torch",), pytest.param(("onnxscript",), marks=pytest.mark.process)],
)  # onnxscript alone: torch imports for real, and a first import of torch starts a process
def test_the_torch_suites_skip_naming_what_is_missing(monkeypatch: pytest.MonkeyPatch, missing: tuple[str]) -> None:
    monkeypatch.delenv("ONNXMON_REQUIRE", raising=False)
    for name in missing:
        monkeypatch.setitem(sys.modules, name, None)
    if "torch" not in missing:
        pytest.importorskip("torch")  # onnxscript alone missing: only meaningful where torch is there
    with pytest.raises(pytest.skip.Exception) as caught:
        need_torch()
    reason = str(caught.value)
    assert reason.startswith(f"torch unavailable: {missing[0]} is not installed"), reason
    assert reason.endswith(TORCH_INSTALL)


def test_no_page_or_message_installs_onnxmon_from_pypi() -> None:
    """onnxmon is not on PyPI: every install line is the clone's (``pip install -e '.[EXTRA]'``)."""
    texts = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "monitor").rglob("*.py")]
    pattern = re.compile(r"pip install(?: -{1,2}[\w-]+)* ['\"]?onnxmon\b")
    offenders = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in texts for m in pattern.finditer(p.read_text())]
    assert offenders == []


def test_the_torch_extra_sets_floors_that_ci_tested_version_meets() -> None:
    """Installed over a newer torch the extra must not downgrade it (nor break the torchvision built for it)."""
    requirements = {r.name: r for r in extra("torch")}
    assert set(requirements) == {"torch", "onnxscript"}
    for requirement in requirements.values():
        assert requirement.specifier, f"{requirement}: no floor"
        assert {s.operator for s in requirement.specifier} <= {">="}, f"{requirement}: a floor only, no cap or pin"
    tested = re.search(r"pip install -q torch==(\S+) onnxscript", CI)
    assert tested, ".ci/run no longer installs a tested torch"
    assert requirements["torch"].specifier.contains(tested.group(1))
    assert "2.99" in requirements["torch"].specifier  # a newer torch satisfies it as it is


def test_mypy_treats_torch_as_optional() -> None:
    """``mypy monitor`` gives one answer with and without torch: never followed, never required."""
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]["overrides"]
    (torch,) = [o for o in overrides if "torch" in o["module"]]
    assert {"torch", "torch.*", "onnxscript", "onnxscript.*"} <= set(torch["module"])
    assert torch["ignore_missing_imports"] is True and torch["follow_imports"] == "skip"


def test_ci_first_runs_the_newcomers_check_in_a_fresh_venv_without_extras() -> None:
    lines = CI.replace("\\\n", " ").splitlines()
    install_torch = next(i for i, line in enumerate(lines) if re.search(r"pip install .*\btorch==", line))
    first_venv = next(i for i, line in enumerate(lines) if "-m venv" in line)
    fresh_pytest = next(i for i, line in enumerate(lines) if "/bin/pytest" in line)
    assert first_venv < fresh_pytest < install_torch
    venv = re.search(r"python3 -m venv (\S+)", lines[first_venv])
    assert venv and venv.group(1) != ".venv", "the newcomer's check needs its own venv, not the one torch goes into"
    assert "-e '.[dev]'" in lines[first_venv] and "torch" not in lines[first_venv]
    command = lines[fresh_pytest]
    assert "-u ONNXMON_REQUIRE" in command, "optional suites must skip there, as on a laptop"
    named = re.findall(r"tests/\S+\.py", command)
    assert {"tests/test_lint.py", "tests/test_docs.py", "tests/test_torchref.py"} <= set(named)
    assert all((ROOT / path).is_file() for path in named), named
