"""How a command prints: ``-o table|json|yaml|wide`` (``--json`` is ``-o json``), and global options.

Every command that prints takes ``-c/--config``, ``-o``/``--output`` and ``--json`` after its name,
from one place: ``options`` adds them and hands the command one resolved ``Output``; the root takes
them before it (``onnxmon -o json -c prod.yaml history m``). A value given after the command wins
over one given before; a format not in ``FORMATS`` is refused while the line is parsed (exit 2).
A command prints only through ``emit``: its data, or its table or sentence. ``table`` is a rich
table on a terminal and plain tab-separated lines (a header, then one row per line, no box
drawing) when stdout is a pipe or a file, so ``cut -f2`` and ``awk -F'\\t'`` work; ``wide`` adds
the columns a table leaves out (full hashes). ``json`` goes through ``monitor.jsonsafe`` (strict,
RFC 3339 UTC timestamps) and ``yaml`` is the same data as YAML, in block style.
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import functools
import inspect
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from monitor import jsonsafe
from monitor.cli import terminal


class Format(enum.StrEnum):
    """What ``-o`` takes: a table (TSV when piped), the same with every column, or the data."""

    TABLE = "table"
    JSON = "json"
    YAML = "yaml"
    WIDE = "wide"


FORMATS = tuple(f.value for f in Format)


def parse_format(value: str) -> Format:
    """``-o VALUE`` checked while the command line is parsed: a wrong value is a usage error (exit 2)."""
    try:
        return Format(value.lower())
    except ValueError:
        # "-o", not "'-o' / '--output'": the choices fit one line of the error box of an 80-column terminal
        raise typer.BadParameter(f"expected one of {' | '.join(FORMATS)}, got {value!r}", param_hint="-o") from None


OutputOption = typer.Option(
    None,
    "-o",
    "--output",
    metavar="FORMAT",
    parser=parse_format,
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


def chosen(output: str | None, as_json: bool = False) -> Format:
    """The format this invocation asked for: after the command beats before it; ``--json`` is json."""
    if output is None and as_json:
        output = Format.JSON
    if output is None:
        output = _root_param("output")
        if output is None and _root_param("as_json"):
            output = Format.JSON
    return parse_format(output or Format.TABLE)


@dataclasses.dataclass(frozen=True)
class Output:
    """One invocation's ``-c``/``-o``/``--json``, resolved once (after the command beats before it).

    Commands get it from ``options`` and print only through ``emit``, so every command's
    ``-o yaml`` is YAML and every table is TSV in a pipe.
    """

    format: Format
    config_file: str | None

    @property
    def wide(self) -> bool:
        return self.format is Format.WIDE

    @property
    def structured(self) -> bool:
        return structured(self.format)

    def emit(
        self,
        data: Callable[[], Any],
        text: Callable[[bool], Shown] | None = None,
        *,
        quiet: bool = False,
        err: bool = False,
    ) -> None:
        """``emit`` in this invocation's format."""
        emit(self.format, data, text, quiet=quiet, err=err)


def options(*, reads_config: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the shared ``-c/--config``, ``-o/--output`` and ``--json`` and hand it the resolved ``Output``.

    The command takes a keyword-only ``out: Output`` instead of declaring the three itself; the options
    are added last to its signature, as typer reads it. ``reads_config=False``: ``-c`` is accepted and
    ignored (the command reads no config), as scripts pass it everywhere.
    """

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        own = [p for name, p in signature.parameters.items() if name != "out"]
        if len(own) == len(signature.parameters):
            raise TypeError(f"{command.__qualname__} takes no `out` parameter for output.options to give")
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        shared = [
            inspect.Parameter(
                "config_path", kind, default=ConfigOption if reads_config else UnusedConfigOption, annotation=str | None
            ),
            inspect.Parameter("output_format", kind, default=OutputOption, annotation=str | None),
            inspect.Parameter("as_json", kind, default=JsonOption, annotation=bool),
        ]

        @functools.wraps(command)
        def with_output(*args: Any, **kwargs: Any) -> Any:
            fmt = chosen(kwargs.pop("output_format"), kwargs.pop("as_json"))
            out = Output(format=fmt, config_file=config_file(kwargs.pop("config_path")))
            return command(*args, **kwargs, out=out)

        parameters = [p.replace(kind=kind) for p in own] + shared
        with_output.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        with_output.__annotations__ = {p.name: p.annotation for p in parameters}
        return with_output

    return decorate


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
        shown = console()
        _fit(table, shown)
        shown.print(table)
        return
    typer.echo(tsv(table), nl=False)


def _fit(table: Table, shown: Console) -> None:
    """Where rich would crop the table at the terminal's edge, narrow its widest columns until it fits.

    Minimum widths keep short words whole (``common.PlainTable``), but where rich cannot give every
    column its minimum it crops each line at the right edge: the last columns vanish with no sign they
    were there (``baseline history`` lost its recorded and note columns at 80 columns). Here the
    widest column that can fold gives way first, never below its header's longest word; ``no_wrap``
    columns keep their widths. Nothing changes for a table rich lays out within the width.
    """
    widths_of = getattr(table, "_calculate_column_widths", None)  # rich's own layout (private: guarded)
    extra = getattr(table, "_extra_width", None)
    if widths_of is None or not isinstance(extra, int):
        return

    def overflow() -> int:  # the last cell's right padding may go: rich crops a blank, nothing shown
        right = table.padding[1] if isinstance(table.padding, tuple) and len(table.padding) == 4 else 0
        return int(sum(widths_of(shown, shown.options))) + extra - shown.width - int(right)

    unclamped = shown.options.update_width(1_000_000)
    widths = [_widest(shown, unclamped, column) for column in table.columns]
    floors = [max((len(w) for w in _plain(column.header).split()), default=1) for column in table.columns]
    while overflow() > 0:
        shrinkable = [i for i, c in enumerate(table.columns) if not c.no_wrap and widths[i] > floors[i]]
        if not shrinkable:
            return
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
        column = table.columns[widest]
        column.max_width = widths[widest]
        column.min_width = min(column.min_width or 0, widths[widest]) or None


def _widest(shown: Console, options: Any, column: Any) -> int:
    """The width of a column's longest cell (or header) unfolded, without padding."""
    return max((Measurement.get(shown, options, cell).maximum for cell in [column.header, *column.cells]), default=0)


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


Shown = Table | str | Sequence[Table | str]
"""What a command shows when it does not print data: a table, a sentence, or several of them in order."""


def emit(
    fmt: str,
    data: Callable[[], Any],
    text: Callable[[bool], Shown] | None = None,
    *,
    quiet: bool = False,
    err: bool = False,
) -> None:
    """The one way a command prints: ``data()`` for json/yaml, else ``text(wide)``.

    A table is a rich table on a terminal and TSV when piped; a sentence is printed as written, its
    control characters but tab and newline written out (``terminal.safe``).
    ``text=None``: the data is the only form (``table`` prints it as JSON). ``quiet``: nothing
    unless data was asked for. ``err``: the text goes to stderr (an error report), the data to stdout.
    """
    if structured(fmt) or text is None:
        print_data(data(), fmt if structured(fmt) else "json")
        return
    if quiet:
        return
    shown = text(fmt == Format.WIDE)
    for part in [shown] if isinstance(shown, Table | str) else shown:
        if isinstance(part, Table):
            print_table(part)
        else:  # a sentence may quote a person's text (a noted incident's fix): shown, never obeyed
            typer.echo(terminal.safe(part), nl=not part.endswith("\n"), err=err)
