"""The package tree keeps its shape: no import circle, no module over 400 lines, boundaries by folder.

The map (docs/architecture.md) is held true here too: its folder table's "may import" column is
turned into import-linter contracts and checked against the real imports, and its third-party
boundaries must each be a ruff banned-api entry and an import-linter contract covering every module.

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
import tomllib
from pathlib import Path

import pytest

from tests.layout import (
    MAX_LINES,
    VOCABULARY_ROOMS,
    MapRow,
    Tree,
    allowed_rooms,
    layer_rooms,
    map_rows,
    room_of,
    third_party_boundaries,
)

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# Modules everything else may import: they must stay free of third-party packages.
VOCABULARY = (
    "monitor.results",
    "monitor.errors",
    "monitor.jsonsafe",
    "monitor.bounded",
    "monitor.details",
    "monitor.shapes",
)


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


def test_no_module_fits_its_lines_by_switching_the_formatter_off() -> None:
    # a module near the cap is split by concept; `# fmt: skip` packed lines the formatter would open
    skipped = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "monitor").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if "fmt: skip" in line or "fmt: off" in line
    ]
    assert skipped == []


@pytest.mark.parametrize("module", VOCABULARY)
def test_the_shared_vocabulary_imports_only_the_standard_library(module: str) -> None:
    assert Tree(ROOT).third_party_imports(module) == set()


@pytest.mark.process
def test_the_import_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Contracts: \d+ kept, 0 broken", result.stdout)


@pytest.mark.process
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


@pytest.mark.process
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


# --- the map's "may import" column, as contracts ------------------------------------------------------


def importlinter_config(root: Path) -> dict:  # type: ignore[type-arg]
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]


def the_map(root: Path) -> tuple[list[MapRow], list[set[str]]]:
    rows = map_rows((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    (layers,) = [c["layers"] for c in importlinter_config(root)["contracts"] if c["type"] == "layers"]
    return rows, layer_rooms(layers)


def row_of(module: str, rows: list[MapRow]) -> MapRow:
    """The map's row for ``module``: the row of its sub-folder (``api/web``) when it has one, else its room's."""
    path = "/".join(module.split(".")[1:])
    for row in rows:
        if row.subfolder and (path == row.subfolder or path.startswith(row.subfolder + "/")):
            return row
    (row,) = [r for r in rows if r.subfolder is None and room_of(module) in r.rooms]
    return row


def map_offences(root: Path) -> list[str]:
    """Each import of a module under ``root`` that its row's "may import" column does not allow."""
    rows, layers = the_map(root)
    offences = []
    for module, targets in sorted(Tree(root).imports().items()):
        if module == "monitor":
            continue  # the package root: __version__ and a docstring
        row = row_of(module, rows)
        allowed = allowed_rooms(row, rows, layers)
        if allowed is None:
            continue
        for target in sorted(targets):
            room = room_of(target)
            if room and room not in allowed | set(VOCABULARY_ROOMS) | set(row.rooms):
                offences.append(f"{module} -> {target} ({room} is not in its row's 'may import')")
    return offences


def map_contracts(root: Path) -> str:
    """The map's table as import-linter forbidden contracts, one per row (a TOML config for ``lint-imports``)."""
    rows, layers = the_map(root)
    rooms = sorted(set().union(*layers))
    lines = ["[tool.importlinter]", 'root_package = "monitor"', ""]
    for row in rows:
        allowed = allowed_rooms(row, rows, layers)
        if row.subfolder is not None or allowed is None:
            continue  # a sub-folder's row is its room's ("as api/"); "everything" forbids nothing
        forbidden = [f"monitor.{r}" for r in rooms if r not in allowed | set(VOCABULARY_ROOMS) | set(row.rooms)]
        if forbidden:
            lines += [
                "[[tool.importlinter.contracts]]",
                f'name = "the map: {" and ".join(row.rooms)} may import {row.may_import.split(";")[0]}"',
                'type = "forbidden"',
                f"source_modules = {[f'monitor.{r}' for r in row.rooms]!r}".replace("'", '"'),
                f"forbidden_modules = {forbidden!r}".replace("'", '"'),
                "allow_indirect_imports = true",
                "",
            ]
    return "\n".join(lines)


def lint_map_contracts(root: Path, config: Path) -> subprocess.CompletedProcess[str]:
    config.write_text(map_contracts(root), encoding="utf-8")
    return subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache", "--config", str(config)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_map_has_one_row_per_room_of_the_package() -> None:
    rows, layers = the_map(ROOT)
    in_rows = [room for row in rows if row.subfolder is None for room in row.rooms]
    package = {room_of(module) for module in Tree(ROOT).modules()} - {""}
    assert sorted(in_rows) == sorted(package)
    assert set(in_rows) == set().union(*layers), "the table and the layers contract name different folders"


def test_each_row_may_import_only_what_the_layers_contract_puts_below_it() -> None:
    rows, layers = the_map(ROOT)
    for row in rows:
        allowed = allowed_rooms(row, rows, layers)
        if allowed is None:
            continue
        level = next(i for i, layer in enumerate(layers) if set(row.rooms) <= layer)
        assert allowed <= set().union(*layers[level + 1 :]), f"{row.rooms} names a folder above it: {allowed}"


@pytest.mark.slow
def test_the_real_imports_are_the_ones_the_map_allows() -> None:
    assert map_offences(ROOT) == []


@pytest.mark.process
def test_the_maps_table_holds_as_import_linter_contracts(tmp_path: Path) -> None:
    result = lint_map_contracts(ROOT, tmp_path / "map.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    kept = re.search(r"Contracts: (\d+) kept, 0 broken", result.stdout)
    assert kept and int(kept.group(1)) >= 15, result.stdout


@pytest.mark.process
def test_an_import_the_layers_allow_but_the_map_does_not_is_caught(copy: Path, tmp_path: Path) -> None:
    # config sits below lint in the layers, but lint's row says "files, vocabulary"
    append(copy / "monitor" / "lint" / "graph.py", "\nfrom monitor.config import schema  # noqa: E402, F401\n")
    assert lint_imports(copy).returncode == 0  # the layers contract alone lets it through
    assert any(o.startswith("monitor.lint.graph -> monitor.config.schema") for o in map_offences(copy))
    result = lint_map_contracts(copy, tmp_path / "map.toml")
    assert result.returncode != 0
    assert "monitor.lint.graph -> monitor.config.schema" in result.stdout


def test_each_third_party_boundary_of_the_map_is_a_ruff_entry_and_a_contract_over_every_module() -> None:
    boundaries = third_party_boundaries((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert {"torch", "onnxscript", "onnxruntime", "sqlalchemy", "prometheus_client", "fastapi"} <= set(boundaries)
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]["lint"]
    banned = set(ruff["flake8-tidy-imports"]["banned-api"])
    assert set(boundaries) - banned == set(), "the map names a boundary ruff's banned-api does not have"
    exempt = {path.removesuffix("/**") for path, codes in ruff["per-file-ignores"].items() if "TID251" in codes}
    assert {f for f in exempt if f.startswith("monitor/")} == set().union(*boundaries.values())
    contracts = [c for c in importlinter_config(ROOT)["contracts"] if c["type"] == "forbidden"]
    uncovered = []
    for package, folders in sorted(boundaries.items()):
        homes = [folder.replace("/", ".") for folder in folders]
        sources = [s for c in contracts if package in c["forbidden_modules"] for s in c["source_modules"]]
        for module in Tree(ROOT).modules():
            if module == "monitor" or any(h == module or h.startswith(module + ".") for h in homes):
                continue  # the root, a home, or a package above a home (monitor.sinks above sinks.prometheus)
            if any(module.startswith(h + ".") for h in homes):
                continue
            if not any(module == s or module.startswith(s + ".") for s in sources):
                uncovered.append(f"{package}: {module}")
    assert uncovered == [], "modules no forbidden contract keeps the package out of"


def test_baseline_metadata_is_made_in_one_place_with_one_timestamp_form() -> None:
    # issue 26: capture.py wrote created_at "...Z", torchref/reference.py "+00:00", and baselines were
    # sorted by that string
    root = Path(__file__).resolve().parent.parent / "monitor"
    made = re.compile(r"\bBaselineMeta\(\s*\n?\s*id=")
    makers = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if made.search(p.read_text()))
    assert makers == ["files/baseline_meta.py"], makers
    from monitor.files.baseline_meta import created_seconds

    assert created_seconds("2026-12-01T10:00:00Z") == created_seconds("2026-12-01T10:00:00+00:00")
    assert created_seconds("2026-12-01T09:00:00+00:00") < created_seconds("2026-12-01T10:00:00.5Z")
