"""``onnxmon env show|diff``: this machine's environment snapshot, and what changed between two.

A snapshot reference (``REF``) is, in order: a path to a JSON file holding a snapshot (or a
check result with an ``environment`` key), the word ``current`` (capture now), or anything
one of the lookups passed to :func:`resolve_snapshot` knows (a fingerprint; baseline ids
once the store is wired in).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from monitor import jsonsafe
from monitor.errors import MonitorError
from monitor.runtime import envsnap

Lookup = Callable[[str], Mapping[str, Any] | None]
"""Maps a reference (e.g. a fingerprint) to a snapshot dict, or ``None`` when it does not know it."""


def current_lookup(ref: str) -> Mapping[str, Any] | None:
    """``current`` means a snapshot captured now, in this process."""
    return envsnap.capture().to_dict() if ref == "current" else None


def resolve_snapshot(ref: str, lookups: Sequence[Lookup] = ()) -> envsnap.EnvSnapshot:
    """The snapshot ``ref`` names: a JSON file path first, then the first lookup that knows ``ref``."""
    path = Path(ref)
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise MonitorError(f"{path}: cannot read a JSON snapshot: {exc}") from exc
        return _snapshot_from(data, str(path))
    for lookup in lookups:
        found = lookup(ref)
        if found is not None:
            return _snapshot_from(found, ref)
    raise MonitorError(f"{ref!r}: no such snapshot; expected a snapshot JSON file, 'current', or a known fingerprint")


def _snapshot_from(data: Any, where: str) -> envsnap.EnvSnapshot:
    if isinstance(data, Mapping) and "fields" not in data and isinstance(data.get("environment"), Mapping):
        data = data["environment"]  # a whole check result
    try:
        return envsnap.EnvSnapshot.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MonitorError(
            f"{where}: not an environment snapshot: expected {{'fingerprint': ..., 'fields': "
            f"{{name: {{'value': ..., 'stable': bool}}}}}} ({type(exc).__name__}: {exc})"
        ) from exc


def format_diff(a: envsnap.EnvSnapshot, b: envsnap.EnvSnapshot, changes: Sequence[envsnap.FieldChange]) -> str:
    """Human text: both fingerprints, one line per changed field, then the one-line summary."""
    same = "same fingerprint" if a.fingerprint == b.fingerprint else "fingerprint differs"
    lines = [f"{envsnap.short(a.fingerprint)} → {envsnap.short(b.fingerprint)}: {same}"]
    width = max((len(c.field) for c in changes), default=0)
    for c in changes:
        kind = "stable  " if c.stable else "volatile"
        lines.append(f"  {kind}  {c.field:<{width}}  {envsnap.render(c.old)} → {envsnap.render(c.new)}")
    lines.append(envsnap.summary(changes))
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Show the environment snapshot, or diff two snapshots.", no_args_is_help=True)

    @group.command("show")
    def show(as_json: bool = typer.Option(False, "--json", help="Print the snapshot as JSON.")) -> None:
        """Capture this machine's environment and print it, grouped by section, stable vs volatile."""
        snapshot = envsnap.capture()
        typer.echo(jsonsafe.dumps(snapshot.to_dict(), indent=2) if as_json else envsnap.format_table(snapshot))

    @group.command("diff")
    def diff(
        a: str = typer.Argument(..., help="Snapshot JSON file, 'current', or fingerprint."),
        b: str = typer.Argument("current", help="Snapshot JSON file, 'current', or fingerprint."),
        as_json: bool = typer.Option(False, "--json", help="Print the changes as JSON."),
    ) -> None:
        """List the fields that changed from A to B, stable first; exit 1 when the fingerprints differ."""
        lookups = [current_lookup]
        first, second = resolve_snapshot(a, lookups), resolve_snapshot(b, lookups)
        changes = envsnap.diff(first, second)
        if as_json:
            payload = {
                "a": first.fingerprint,
                "b": second.fingerprint,
                "same_fingerprint": first.fingerprint == second.fingerprint,
                "summary": envsnap.summary(changes),
                "changes": [c.to_dict() for c in changes],
            }
            typer.echo(jsonsafe.dumps(payload, indent=2))
        else:
            typer.echo(format_diff(first, second, changes))
        if first.fingerprint != second.fingerprint:
            raise typer.Exit(1)

    app.add_typer(group, name="env")
