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
from rich.table import Table
from rich.text import Text

from monitor import jsonsafe
from monitor.cli import common, output
from monitor.config import settings as config
from monitor.errors import MonitorError
from monitor.runtime import envsnap

if TYPE_CHECKING:
    from monitor.store import EventRecord, HistoryItem, RunRecord

_VERDICT_STYLE = {"pass": "green", "fail": "bold red", "error": "bold magenta"}


def register(app: typer.Typer) -> None:
    @app.command("history")
    def history(
        model: str = typer.Argument(..., help="Model name as in the config."),
        since: str | None = typer.Option(None, "--since", help="Only this far back, e.g. 7d, 12h, 30m."),
        node: str | None = typer.Option(None, "--node", help="Only runs on this node (plus model-wide events)."),
        limit: int = typer.Option(200, "--limit", min=1, help="At most this many runs."),
        as_json: bool = common.JsonOption,
        fmt: str | None = common.OutputOption,
        config_file: str | None = common.ConfigOption,
        url: str | None = typer.Option(None, "--url", help="Database URL (default: store.url from the config)."),
    ) -> None:
        """Show a model's runs with environment changes and baseline promotions interleaved."""
        chosen = output.chosen(fmt, as_json)
        start = _since(since)
        with common.open_store(common.settings(config_file), url) as store:
            items = store.history(model, since=start, limit=limit, node=node)
            if not items and model not in store.models():
                known = ", ".join(store.models()) or "none yet"
                raise MonitorError(f"model '{model}' has no history in {store.display_url} (models: {known})")
        if output.structured(chosen):
            common.print_json([_item_json(i) for i in items], chosen)
            return
        output.print_table(_table(model, list(reversed(items)), wide=chosen == "wide"))


def _since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        seconds = config.parse_duration(value)
    except ValueError as exc:
        raise MonitorError(f"--since: {exc}") from None
    try:
        return datetime.now(UTC) - timedelta(seconds=seconds)
    except OverflowError:  # further back than datetime reaches: everything is "since" then
        return datetime.min.replace(tzinfo=UTC)


def _table(model: str, items: list[HistoryItem], *, wide: bool = False) -> Table:
    """Oldest first; each run's id (what ``incident note``, ``diagnose --run`` and the run page take), and
    its environment fingerprint last (16 hex, all 64 with ``wide``), which ``onnxmon env diff`` takes as it is."""
    cut = 64 if wide else 16
    table = common.PlainTable(title=Text(f"history of {model} (oldest first)"), title_justify="left")
    # Short cells never wrap (an 80-column terminal folded "when (UTC)" and the timestamps in two);
    # the long ones fold, so ids and fingerprints stay whole and pasteable.
    for header, justify, wrap in (
        ("when (UTC)", "left", False),
        ("run", "right", False),
        ("node", "left", True),
        ("verdict", "left", False),
        ("worst output", "left", True),
        ("max |err|", "right", False),
        (common.ERROR_RATIO_HEADER, "right", True),
        ("why / what changed", "left", True),
        ("environment", "left", True),
    ):
        table.add_column(header, justify=justify, overflow="fold", no_wrap=not wrap)  # type: ignore[arg-type]
    for item in items:
        when = item.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        if item.run is not None:
            fingerprint = item.run.environment_fingerprint or "-"
            table.add_row(when, str(item.run.id), *_run_cells(item.run), fingerprint[:cut])
        elif item.event is not None:
            event = item.event
            table.add_row(
                Text(when, style="yellow"),
                "",
                event.node or "",
                Text(f"* {event.kind}", style="yellow"),
                "",
                "",
                "",
                Text(describe(event), style="yellow"),
                Text(_change(event, cut), style="yellow"),
            )
    return table


def _run_cells(run: RunRecord) -> tuple[Any, ...]:
    why = "; ".join(str(r) for r in run.reasons)
    if run.attribution:
        why = f"{why} -> {run.attribution}" if why else run.attribution
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
