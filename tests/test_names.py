"""Every onnxmon module is imported under its own name (issue 26, item 4).

Why: after the package moved into rooms, ``from monitor.files import tensors as tensorio`` kept the
old names alive; a reader grepping for ``tensors.`` missed the call sites, and ``knowledge`` meant two
different modules in two files. This test parses every Python file of the repository (``monitor/``,
``tests/``, ``bench/``, ``scripts/``) with ``ast`` and lists, as ``file:line``, each import that binds
an onnxmon *module* to another name. Aliases of functions and classes (``import judge as
judge_decisions``) and of third-party modules (``numpy as np``) are not its business.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("monitor", "tests", "bench", "scripts")


def python_files(root: Path) -> list[Path]:
    """``*.py`` under the searched folders, plus extension-less scripts whose shebang names python."""
    found: list[Path] = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if path.suffix == ".py":
                found.append(path)
            elif path.suffix == "":
                first = path.read_bytes()[:80].split(b"\n", 1)[0]
                if first.startswith(b"#!") and b"python" in first:
                    found.append(path)
    return found


def is_module(root: Path, dotted: str) -> bool:
    """Whether ``dotted`` (``monitor.files.tensors``) names a module or package of the tree at ``root``."""
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def renamed_modules(root: Path, path: Path) -> list[str]:
    """``file:line: import ... as alias`` for each onnxmon module that ``path`` binds to another name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = path.relative_to(root)
    offences: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                own = alias.name.rsplit(".", 1)[-1]
                if alias.name.split(".")[0] == "monitor" and alias.asname and alias.asname != own:
                    offences.append(f"{where}:{node.lineno}: import {alias.name} as {alias.asname}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "monitor":
                continue
            for alias in node.names:
                if alias.asname and alias.asname != alias.name and is_module(root, f"{node.module}.{alias.name}"):
                    offences.append(f"{where}:{node.lineno}: from {node.module} import {alias.name} as {alias.asname}")
    return offences


@pytest.mark.slow
def test_every_onnxmon_module_is_imported_under_its_own_name() -> None:
    offences = [line for path in python_files(ROOT) for line in renamed_modules(ROOT, path)]
    assert not offences, (
        "onnxmon modules imported under another name; import them as themselves "
        "(rename a clashing local, not the module):\n" + "\n".join(offences)
    )


def test_the_rule_bites_on_a_renamed_module_and_spares_functions(tmp_path: Path) -> None:
    (tmp_path / "monitor" / "files").mkdir(parents=True)
    (tmp_path / "monitor" / "__init__.py").write_text("")
    (tmp_path / "monitor" / "files" / "__init__.py").write_text("")
    (tmp_path / "monitor" / "files" / "tensors.py").write_text("def load(): ...\n")
    source = tmp_path / "monitor" / "user.py"
    source.write_text(
        "import numpy as np\n"
        "from monitor.files import tensors as tensorio\n"
        "import monitor.files.tensors as t\n"
        "from monitor.files.tensors import load as load_tensors\n"
        "from monitor.files import tensors\n"
        "import monitor.files.tensors as tensors\n"
    )
    assert renamed_modules(tmp_path, source) == [
        "monitor/user.py:2: from monitor.files import tensors as tensorio",
        "monitor/user.py:3: import monitor.files.tensors as t",
    ]
