"""A release: one version everywhere, a changelog for it, and a wheel that works on its own.

The wheel test is what a user installing a release meets: ``python -m build`` makes the sdist and,
from it, the wheel; the wheel must carry every file ``monitor/`` needs at runtime (templates,
rules.yaml, the migrations and their ``script.py.mako``, ``py.typed``); installed with the README's
first command's extra into a clean venv, its ``onnxmon`` runs that command's ``onnxmon`` part on a
copy of the example outside this checkout, so nothing is imported from the source tree. Building
and installing need PyPI (setuptools for the isolated build, the dependencies): its suite is
``wheel``; without a network it skips, unless ``ONNXMON_REQUIRE`` lists it (``.ci/run`` does).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

import monitor
from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parents[1]
SUITE = "wheel"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
VERSION = PROJECT["version"]
# pip's output for "could not download" (no network, no such release), not for a broken build.
DOWNLOAD_FAILURE = re.compile(
    r"No matching distribution found|Could not find a version that satisfies|NewConnectionError"
    r"|Failed to establish a new connection|Temporary failure in name resolution|Network is unreachable"
    r"|Max retries exceeded|ConnectTimeout|ReadTimeoutError"
)


# --- one version, and a changelog entry for it ----------------------------------------------------


def test_the_version_is_the_same_everywhere_it_is_written() -> None:
    """docs/releasing.md's bump: pyproject.toml, monitor.__version__, the chart, both images, the runbook links."""
    chart = yaml.safe_load((ROOT / "helm" / "onnxmon" / "Chart.yaml").read_text(encoding="utf-8"))
    cpu = yaml.safe_load((ROOT / "helm" / "onnxmon" / "values-cpu.yaml").read_text(encoding="utf-8"))
    found = {
        "pyproject.toml": VERSION,
        "monitor/__init__.py": monitor.__version__,
        "Chart.yaml appVersion": chart["appVersion"],
        "values-cpu.yaml image.tag": cpu["image"]["tag"].removesuffix("-cpu"),
    }
    for dockerfile in ("deploy/Dockerfile", "deploy/Dockerfile.cpu"):
        arg = re.search(r"^ARG VERSION=(\S+)$", (ROOT / dockerfile).read_text(encoding="utf-8"), re.MULTILINE)
        found[dockerfile] = arg.group(1) if arg else "(no ARG VERSION)"
    for linking in ("deploy/prometheus/alerts.yaml", "helm/onnxmon/files/alerts.yaml", "deploy/grafana/onnxmon.json"):
        tags = set(re.findall(r"/blob/v([^/]+)/docs/", (ROOT / linking).read_text(encoding="utf-8")))
        assert tags, f"{linking}: no runbook link to a tag"
        found.update({f"{linking} runbook tag v{tag}": tag for tag in tags})
    assert set(found.values()) == {VERSION}, found
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), f"{VERSION}: not MAJOR.MINOR.PATCH"


def test_the_changelog_has_unreleased_and_a_section_for_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert sections[:1] == ["Unreleased"], sections
    assert VERSION in sections, f"CHANGELOG.md has no '## [{VERSION}]' section (docs/releasing.md)"
    released = [tuple(int(n) for n in s.split(".")) for s in sections[1:]]
    assert released == sorted(released, reverse=True), f"newest first: {sections}"
    for section in sections:  # Keep a Changelog's link references
        assert re.search(rf"^\[{re.escape(section)}\]: https://", text, re.MULTILINE), f"no link for [{section}]"


# --- the built wheel, installed into a clean venv --------------------------------------------------


def readme_first_command() -> tuple[str, list[str]]:
    """The README's first command: the extra it installs and the ``onnxmon`` command it then runs."""
    block = re.search(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    assert block, "README.md starts with no sh block"
    first = block.group(1).splitlines()[0]
    parsed = re.fullmatch(
        r"python3 -m venv (\S+) && \1/bin/pip install -q -e '\.\[(\w+)\]' && \1/bin/(onnxmon(?: \S+)*)", first
    )
    assert parsed, f"README's first command changed shape; mirror it here: {first}"
    return parsed.group(2), shlex.split(parsed.group(3))[1:]


def clean_env() -> dict[str, str]:
    """No ``PYTHONPATH`` (a worktree's would import this checkout), no ``ONNXMON_*`` (read as config)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("ONNXMON_", "PYTHON", "VIRTUAL_ENV"))}


def run(command: list[str | Path], *, cwd: Path, what: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a packaging step; a download failure is the suite being unavailable, anything else a failure."""
    argv = [str(part) for part in command]
    try:
        done = subprocess.run(argv, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        unavailable(SUITE, f"{what} took over {timeout:.0f} s")
        raise AssertionError("unreachable") from None
    if done.returncode != 0 and DOWNLOAD_FAILURE.search(done.stdout + done.stderr):
        unavailable(SUITE, f"{what}: cannot download: {(done.stdout + done.stderr).strip()[-400:]}")
    assert done.returncode == 0, f"{what} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build``: the sdist, then the wheel built from it (as a release is made)."""
    if importlib.util.find_spec("build") is None:
        pytest.fail("`build` is not installed (the dev extra's): .venv/bin/pip install -e '.[dev]'")
    checkout = clean_checkout(tmp_path_factory.mktemp("checkout"))
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", out, checkout], cwd=out, what="python -m build", timeout=600)
    return out


def clean_checkout(into: Path) -> Path:
    """The files git would commit (tracked, or new and not ignored), copied: what a release's tag holds.

    Built in place, setuptools would read the ``onnxmon.egg-info/SOURCES.txt`` an editable install
    or an earlier build left here and ship every file it lists, package-data or not: a file missing
    from ``pyproject.toml`` would still reach the wheel here and be missing from a release's.
    """
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    assert listed.returncode == 0, f"git ls-files: {listed.stderr.decode(errors='replace')}"
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is listed and absent
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


@pytest.mark.process
@pytest.mark.slow
def test_build_makes_an_sdist_and_a_wheel_with_every_file_monitor_ships(dist: Path) -> None:
    wheel, sdist = dist / f"onnxmon-{VERSION}-py3-none-any.whl", dist / f"onnxmon-{VERSION}.tar.gz"
    assert sorted(p.name for p in dist.iterdir()) == sorted([wheel.name, sdist.name])
    shipped = set(zipfile.ZipFile(wheel).namelist())
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "monitor"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    source = {name for name in listed.stdout.split() if (ROOT / name).is_file()}
    assert sorted(source - shipped) == [], "in monitor/ but not in the wheel: add it to package-data in pyproject.toml"
    for needed in ("monitor/py.typed", "monitor/knowledge/rules.yaml", "monitor/store/migrations/script.py.mako"):
        assert needed in shipped
    assert any(n.startswith("monitor/api/web/templates/") and n.endswith(".html") for n in shipped)
    assert any(n.startswith("monitor/store/migrations/versions/0001") for n in shipped)
    with tarfile.open(sdist) as archive:
        assert f"onnxmon-{VERSION}/README.md" in archive.getnames()  # the long description


@pytest.mark.process
@pytest.mark.slow
def test_the_wheel_in_a_clean_venv_runs_the_readmes_first_command(dist: Path, tmp_path: Path) -> None:
    extra, argv = readme_first_command()
    wheel = dist / f"onnxmon-{VERSION}-py3-none-any.whl"
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path, what="python -m venv", timeout=120)
    install = [venv / "bin" / "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[{extra}]"]
    run(install, cwd=tmp_path, what=f"pip install {wheel.name}[{extra}]", timeout=900)

    example = tmp_path / "example"  # what a clone holds for the first command, and nothing of monitor/
    example.mkdir()
    shutil.copy2(ROOT / "onnxmon.yaml", example / "onnxmon.yaml")
    for folder in ("examples", "baselines"):
        shutil.copytree(ROOT / folder, example / folder, ignore=shutil.ignore_patterns("__pycache__", "*.db"))

    where = run(
        [venv / "bin" / "python", "-c", "import monitor; print(monitor.__file__)"],
        cwd=example,
        what="import",
        timeout=60,
    )
    assert Path(where.stdout.strip()).is_relative_to(venv), f"monitor came from {where.stdout.strip()}, not the wheel"
    version = run([venv / "bin" / "onnxmon", "--version"], cwd=example, what="onnxmon --version", timeout=60)
    assert version.stdout.strip() == f"onnxmon {VERSION}"
    done = run([venv / "bin" / "onnxmon", *argv], cwd=example, what=f"onnxmon {shlex.join(argv)}", timeout=300)
    assert "tinynet" in done.stdout and "pass" in done.stdout, done.stdout
    assert (example / "onnxmon.db").is_file(), "the run was recorded in the example's SQLite file"
