"""Pieces every command shares: the ``-c`` option, loading settings, opening the store, output."""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from monitor.cli import output, terminal
from monitor.config.settings import Settings
from monitor.config.settings import load as load_settings
from monitor.errors import MonitorError

if TYPE_CHECKING:
    from monitor.store import Store

ConfigOption = output.ConfigOption
# The largest id a store holds (64-bit signed in SQLite and PostgreSQL): past it the driver overflows.
MAX_ID = 2**63 - 1
QuietOption = typer.Option(False, "--quiet", "-q", help="Print nothing but errors; rely on the exit code.")


def console() -> Console:
    """A console that fits the terminal (or 120 columns when piped)."""
    return output.console()


def load(path: str | None) -> Settings:
    """The config named by ``-c`` (after or before the command), unscoped: for commands that need no node."""
    return load_settings(output.config_file(path))


def settings(path: str | None) -> Settings:
    """The config, with baselines scoped to this node or pool (``daemon.baseline_scope``)."""
    from monitor.config import scope
    from monitor.runtime import envsnap  # NVML is probed only for the pool scope

    return scope.apply(load(path), gpu_name=envsnap.first_gpu_name)


def open_store(settings: Settings, url: str | None = None) -> Store:
    """The configured store (or the one at ``url``), its schema checked before anything reads or writes it.

    A SQLite file is created and migrated on first use. A server database (PostgreSQL) is migrated
    only by ``onnxmon db upgrade`` (the Helm chart runs it in an initContainer) or with
    ``store.migrate: auto``, concurrent ones serialized by the migration lock; one that is behind is
    refused in one line (``ensure_schema``). A database that cannot be reached is handed back as it is: the callers'
    outage path (the spool, ``/readyz``) deals with it.
    """
    from monitor.store import Store

    store = Store.configured(settings.store.model_copy(update={"url": url} if url else {}))
    try:
        ensure_schema(store, settings.store.migrate)
    except BaseException:
        store.close()
        raise
    return store


def ensure_schema(store: Store, migrate: str = "off") -> None:
    """Migrate a SQLite file (or any store with ``migrate == "auto"``); refuse a server database that is behind.

    A database at a revision this onnxmon does not know (``SchemaTooNew``: a newer onnxmon migrated it)
    and a schema check that waited its time limit for a lock (``SchemaLocked``) end in one line, exit 3;
    a check's results then go to the spool.
    """
    from monitor.store import SchemaLocked, SchemaTooNew

    if store.url.startswith("sqlite") or migrate == "auto":
        store.upgrade()
        return
    try:
        revision = store.known_revision()
    except (SchemaTooNew, SchemaLocked):
        raise
    except Exception:  # unreachable: not this check's business (the outage path spools, /readyz says so)
        return
    head = store.head_revision()
    if revision != head:
        raise MonitorError(
            f"{store.display_url} is at schema revision {revision or 'none (an empty database)'}, this onnxmon"
            f" needs {head}: run `onnxmon db upgrade` first (or set store.migrate: auto); nothing was written"
        )


def refuse_unready_store(settings: Settings) -> None:
    """Before a command writes anything: an un-migrated store or a missing driver ends it in one line.

    A store that cannot be reached passes: a check still measures and spools its result.
    """
    try:
        store = open_store(settings)
    except MonitorError:
        raise
    except Exception:  # an outage: the recording path spools
        return
    store.close()


def node_identity() -> tuple[str | None, str | None]:
    """Node and pod from the Kubernetes downward API env (the Helm chart sets them)."""
    from monitor.config.identity import identity

    here = identity()
    return here.node, here.pod


ERROR_RATIO_HEADER = "error ÷ tolerance"
"""The one name of ``OutputStats.error_ratio`` (max ``|a-b| / (atol + rtol*|b|)``; 1 is the line) on screen."""


def ratio(value: float | None) -> str:
    """``error_ratio`` as every table shows it: three significant digits; ``-`` when not measured."""
    if value is None or value != value:
        return "-"
    return format(value, ".3g")


def fmt(value: float | int | None, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    return format(value, spec)


NARROW = 110
"""Terminal widths below this get compact tables (``PlainTable``; ``history`` goes further)."""
WHOLE_WORD = 12
"""A word up to this long is never split across lines in a table; a longer token (an id, a hash) folds."""


def narrow_terminal() -> bool:
    """True on a terminal narrower than ``NARROW`` columns (never when piped: TSV has no width)."""
    return output.is_terminal() and output.console().width < NARROW


def _inert(cell: Any) -> Any:
    """A cell whose text cannot drive the terminal: a string as ``Text``, a styled ``Text`` made safe too.

    A styled cell (history's yellow event rows: a promotion note, a model name) is user text as much
    as a plain one; its style is kept, its control characters are written out (``terminal.safe``).
    """
    if isinstance(cell, str):
        return Text(terminal.safe(cell))
    if isinstance(cell, Text) and terminal.safe(cell.plain) != cell.plain:
        return Text(terminal.safe(cell.plain), style=cell.style)
    return cell


class PlainTable(Table):
    """A rich ``Table`` whose string cells are shown exactly as written, never parsed as markup.

    Model, output and node names are data: ``[/]`` in one must not crash the command and
    ``[word]`` must not vanish from the table, and a terminal escape in one is shown, not obeyed
    (``terminal.safe``). Styled cells are passed as ``Text``.
    """

    def __init__(self, *headers: Any, **kwargs: Any) -> None:
        """On a terminal narrower than ``NARROW`` columns: no vertical rules and one space between columns,
        so an 80-column terminal keeps words whole (boxes and padding took a third of its width)."""
        if narrow_terminal() and "box" not in kwargs:
            kwargs |= {"box": box.SIMPLE_HEAD, "show_edge": False, "padding": (0, 1), "collapse_padding": True}
        super().__init__(*headers, **kwargs)

    def add_column(self, header: Any = "", *args: Any, **kwargs: Any) -> None:
        """Columns fold long cells onto the next line instead of cutting them: ids must stay pasteable.

        A header word is never split ("verdi / ct"): the column is at least as wide as its longest word.
        """
        kwargs.setdefault("overflow", "fold")
        words = str(header.plain if isinstance(header, Text) else header).split()
        if words and kwargs.get("min_width") is None:
            kwargs["min_width"] = max(len(w) for w in words)
        super().add_column(header, *args, **kwargs)

    def add_row(self, *renderables: Any, style: Any = None, end_section: bool = False) -> None:
        """Cells as ``Text``; a column is as wide as its longest short word (names, numbers stay whole),
        while a long token (an id, a hash) still folds, whole and pasteable."""
        cells = [_inert(cell) for cell in renderables]
        for column, cell in zip(self.columns, cells, strict=False):
            if isinstance(cell, Text) and cell.plain.split():
                longest = min(max(len(word) for word in cell.plain.split()), WHOLE_WORD)
                column.min_width = max(column.min_width or 0, longest)
        super().add_row(*cells, style=style, end_section=end_section)


def login() -> str:
    """The login name of this shell (``$USER``); empty where there is none (a container's bare uid)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for this uid and no $USER
        return ""
