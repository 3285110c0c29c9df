"""``onnxmon history MODEL``: runs with their worst output, and what changed in between.

Environment changes, model changes, provider fallbacks and baseline promotions are printed
between the runs where they happened, oldest first, so that "it started failing right after
onnxruntime 1.17 -> 1.18" reads straight off the screen. ``--json`` gives the same, newest first.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from monitor import jsonsafe
from monitor.cli import common, output
from monitor.config import settings
from monitor.errors import MonitorError
from monitor.runtime import envsnap

if TYPE_CHECKING:
    from monitor.store import EventRecord, HistoryItem, RunRecord

_VERDICT_STYLE = {"pass": "green", "fail": "bold red", "error": "bold magenta"}


def register(app: typer.Typer) -> None:
    @app.command("history")
    @output.options()
    def history(
        model: str = typer.Argument(..., help="Model name as in the config."),
        since: str | None = typer.Option(None, "--since", help="Only this far back, e.g. 7d, 12h, 30m."),
        node: str | None = typer.Option(None, "--node", help="Only runs on this node (plus model-wide events)."),
        limit: int = typer.Option(200, "--limit", min=1, help="At most this many runs."),
        url: str | None = typer.Option(None, "--url", help="Database URL (default: store.url from the config)."),
        *,
        out: output.Output,
    ) -> None:
        """Show a model's runs with environment changes and baseline promotions interleaved."""
        start = _since(since)
        with common.open_store(common.settings(out.config_file), url) as store:
            items = store.history(model, since=start, limit=limit, node=node)
            if not items and model not in store.models():
                known = ", ".join(store.models()) or "none yet"
                raise MonitorError(f"model '{model}' has no history in {store.display_url} (models: {known})")
        width = output.console().width if output.is_terminal() else None
        out.emit(
            lambda: [_item_json(i) for i in items],
            lambda wide: _table(model, list(reversed(items)), wide=wide, width=width),
        )


def _since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        seconds = settings.parse_duration(value)
    except ValueError as exc:
        raise MonitorError(f"--since: {exc}") from None
    try:
        return datetime.now(UTC) - timedelta(seconds=seconds)
    except OverflowError:  # further back than datetime reaches: everything is "since" then
        return datetime.min.replace(tzinfo=UTC)


NARROW = 110
"""Terminal widths below this get the compact table: minutes without the year, 12-hex fingerprints."""


def _table(model: str, items: list[HistoryItem], *, wide: bool = False, width: int | None = None) -> Table:
    """Oldest first; each run's id (what ``incident note``, ``diagnose --run`` and the run page take), and
    its environment fingerprint last (16 hex, all 64 with ``wide``), which ``onnxmon env diff`` takes as it is.

    ``width`` is the terminal's (None when piped: every cell whole). Below ``NARROW`` columns the times
    lose the year and seconds and fingerprints are cut to 12 hex (``env diff`` takes 12), the node
    column goes when no row has a node, and short cells never wrap: an 80-column terminal folded
    "when (UTC)" and every timestamp in two.
    """
    narrow = width is not None and width < NARROW and not wide
    cut = 64 if wide else 12 if narrow else 16
    stamp = "%m-%d %H:%M" if narrow else "%Y-%m-%d %H:%M:%S"
    nodes = {n for n in ((i.run.node if i.run else i.event.node if i.event else None) for i in items) if n}
    with_node = not narrow or len(nodes) > 1  # compact: one node goes in the title, not in a column
    table = common.PlainTable(
        title=Text(f"history of {model}{f' on {next(iter(nodes))}' if not with_node and nodes else ''} (oldest first)"),
        title_justify="left",
        box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD,  # no vertical rules where width is short
        pad_edge=not narrow,
        collapse_padding=narrow,
    )
    # (header, compact header, justify, min width in compact mode or 0: never wraps)
    columns: list[tuple[str, str, str, int]] = [
        ("when (UTC)", "when (UTC)", "left", 0),
        ("run", "run", "right", 0),
        *([("node", "node", "left", 6)] if with_node else []),
        ("verdict", "verdict", "left", 0),
        ("worst output", "worst", "left", 6),
        ("max |err|", "max err", "right", 0),
        (common.ERROR_RATIO_HEADER, "err/tol", "right", 0),
        ("why / what changed", "why / what changed", "left", 12),
        ("environment", "env", "left", 0),  # a 12-hex fingerprint whole: `env diff` takes it
    ]
    for header, compact, justify, least in columns:
        table.add_column(
            compact if narrow else header,
            justify=justify,  # type: ignore[arg-type]
            overflow="fold",
            no_wrap=narrow and not least,
            min_width=least or None if narrow else None,
        )
    for item in items:
        when = item.at.astimezone(UTC).strftime(stamp)
        if item.run is not None:
            run = item.run
            cells = _run_cells(run)
            fingerprint = (run.environment_fingerprint or "-")[:cut]
            table.add_row(when, str(run.id), *(cells if with_node else cells[1:]), fingerprint)
        elif item.event is not None:
            event = item.event
            yellow = [
                when,
                "",
                *([event.node or ""] if with_node else []),
                "*",
                "",
                "",
                "",
                f"{event.kind}: {describe(event)}",
                _change(event, cut),
            ]
            table.add_row(*(Text(cell, style="yellow") for cell in yellow))
    return table


def _run_cells(run: RunRecord) -> tuple[Any, ...]:
    why = "; ".join(str(r) for r in run.reasons)
    if run.attribution:
        why = f"{why} -> {run.attribution}" if why else run.attribution
    if run.candidate:  # a rehearsal's run on another stack: shown, never production's
        why = f"candidate (rehearsal); {why}" if why else "candidate (rehearsal)"
    return (
        run.node or "",
        Text(run.verdict.value, style=_VERDICT_STYLE.get(run.verdict.value, "")),
        run.worst_output or "-",
        common.fmt(run.worst_max_abs_error),
        common.ratio(run.error_ratio),
        why,
    )


def describe(event: EventRecord) -> str:
    """One line saying what an event changed (``onnxruntime.version 1.17.0 -> 1.18.0``)."""
    if event.kind == "environment_changed":
        diff = envsnap.ordered(d for d in event.detail.get("diff", ()) if isinstance(d, Mapping))
        parts = [f"{d.get('field')} {d.get('old')} -> {d.get('new')}" for d in diff[:4]]
        more = f" (+{len(diff) - 4} more)" if len(diff) > 4 else ""
        return ("; ".join(parts) or f"{_short(event.old)} -> {_short(event.new)}") + more
    if event.kind == "baseline_promoted":
        note = event.detail.get("note")
        why = f": {note}" if note else ""
        return f"baseline {event.new} active (was {event.old or 'none'}) by {event.detail.get('by', '?')}{why}"
    if event.kind == "baseline_captured":
        return f"baseline {event.new} recorded ({event.detail.get('source', '?')})"
    if event.kind == "model_changed":
        return f"model sha256 {_short(event.old)} -> {_short(event.new)}"
    return f"{event.old or '-'} -> {event.new or '-'}"


def _change(event: EventRecord, cut: int) -> str:
    """``old → new`` fingerprints of an environment change (each pasteable into ``env diff``)."""
    if event.kind != "environment_changed":
        return ""
    return f"{(event.old or '-')[:cut]} → {(event.new or '-')[:cut]}"


def _short(value: str | None) -> str:
    return value[:12] if value else "-"


def _item_json(item: HistoryItem) -> dict[str, Any]:
    from monitor.store.convert import json_safe

    body = item.run if item.run is not None else item.event
    data = _plain(dataclasses.asdict(body)) if body is not None else {}
    return {"at": jsonsafe.timestamp(item.at), "kind": item.kind, **json_safe(data)}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return jsonsafe.timestamp(value)
    return value
