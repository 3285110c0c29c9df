"""How a command prints: ``-o table|json|yaml|wide`` (``--json`` is ``-o json``), and global options.

Every command that prints takes ``-o``/``--output`` and ``--json`` after its name; the root takes
them, and ``-c/--config``, before it (``onnxmon -o json -c prod.yaml history m``). A value given
after the command wins over one given before. ``table`` is a rich table on a terminal and plain
tab-separated lines (a header, then one row per line, no box drawing) when stdout is a pipe or a
file, so ``cut -f2`` and ``awk -F'\\t'`` work; ``wide`` adds the columns a table leaves out
(full hashes). ``json`` goes through ``monitor.jsonsafe`` (strict, RFC 3339 UTC timestamps) and
``yaml`` is the same data as YAML.
"""

from __future__ import annotations

import contextvars
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from monitor import jsonsafe
from monitor.cli import terminal

FORMATS = ("table", "json", "yaml", "wide")

OutputOption = typer.Option(
    None,
    "-o",
    "--output",
    metavar="FORMAT",
    help="Output format: table | json | yaml | wide (default: table; tab-separated when piped).",
    show_default=False,
)
JsonOption = typer.Option(False, "--json", help="Same as -o json.", show_default=False)
ConfigOption = typer.Option(
    None,
    "-c",
    "--config",
    metavar="FILE",
    help="Config file (default: $ONNXMON_CONFIG or ./onnxmon.yaml; also before the command).",
    show_default=False,
)


_NONE: Mapping[str, Any] = {}
_GLOBAL: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar("onnxmon_global_options", default=_NONE)


def set_global(ctx: typer.Context, **values: Any) -> None:
    """Remember the root's options for this invocation only (reset when its context closes)."""
    token = _GLOBAL.set(values)
    ctx.call_on_close(lambda: _GLOBAL.reset(token))


UnusedConfigOption = typer.Option(
    None,
    "-c",
    "--config",
    metavar="FILE",
    help="Accepted like on every command (so scripts can pass it everywhere); this one reads no config.",
    show_default=False,
)


def _root_param(name: str) -> Any:
    """A value of the root command's own options (``onnxmon -c f -o json ...``), or None."""
    return _GLOBAL.get().get(name)


def config_file(explicit: str | None) -> str | None:
    """``-c`` after the command, else ``-c`` before it, else None (``$ONNXMON_CONFIG``, ./onnxmon.yaml)."""
    return explicit if explicit is not None else _root_param("config_file")


def chosen(output: str | None, as_json: bool = False) -> str:
    """The format this invocation asked for: after the command beats before it; ``--json`` is json."""
    if output is None and as_json:
        output = "json"
    if output is None:
        output = _root_param("output")
        if output is None and _root_param("as_json"):
            output = "json"
    output = (output or "table").lower()
    if output not in FORMATS:
        raise typer.BadParameter(f"expected one of {' | '.join(FORMATS)}, got {output!r}", param_hint="'-o/--output'")
    return output


def structured(fmt: str) -> bool:
    """``json`` or ``yaml``: the command prints data, not a table or a sentence."""
    return fmt in ("json", "yaml")


def print_data(data: Any, fmt: str = "json") -> None:
    """``data`` as strict indented JSON, or as YAML of the same JSON-safe values."""
    text = jsonsafe.dumps(data, indent=2, default=str)
    if fmt == "yaml":
        text = yaml.safe_dump(json.loads(text), sort_keys=False, allow_unicode=True, width=10_000).rstrip("\n")
    typer.echo(text)


def is_terminal() -> bool:
    return sys.stdout.isatty()


def console() -> Console:
    """A console that fits the terminal (or 120 columns when piped)."""
    return Console(width=None if is_terminal() else 120, highlight=False, soft_wrap=False)


def print_table(table: Table) -> None:
    """A rich table on a terminal; tab-separated lines (header first, no title) otherwise."""
    if is_terminal():
        console().print(table)
        return
    typer.echo(tsv(table), nl=False)


def tsv(table: Table) -> str:
    """The table as tab-separated lines; tabs and newlines inside a cell become spaces."""
    columns = table.columns
    lines = ["\t".join(_plain(c.header) for c in columns)]
    cells = [list(c.cells) for c in columns]
    for row in range(table.row_count):
        lines.append("\t".join(_plain(column[row]) if row < len(column) else "" for column in cells))
    return "\n".join(lines) + "\n"


def _plain(cell: Any) -> str:
    text = cell.plain if isinstance(cell, Text) else str(cell)
    return terminal.safe(text.replace("\t", " ").replace("\r", " ").replace("\n", " "))


def emit(fmt: str, data: Callable[[], Any], text: Callable[[bool], Table | str]) -> None:
    """Print ``data()`` for json/yaml, else ``text(wide)``: a table (TSV when piped) or a sentence."""
    if structured(fmt):
        print_data(data(), fmt)
        return
    shown = text(fmt == "wide")
    if isinstance(shown, Table):
        print_table(shown)
    else:
        typer.echo(shown)
