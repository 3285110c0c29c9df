"""``onnxmon env show|diff``: this machine's environment snapshot, and what changed between two.

A snapshot reference (``REF``) is, in order: a path to a JSON file holding a snapshot (or a
check result with an ``environment`` key), the word ``current`` (capture now), a baseline id
(its recorded environment), or a fingerprint or any prefix of one onnxmon prints (12, 16 or 64
hex; 4 at least), looked up in the store and in the baselines on disk. ``env diff`` with no
argument diffs the active baseline's environment against the current one (the on-call question
"what changed since we validated?"): every configured model's, or the one ``--model`` picks. Volatile
fields (load, clocks) are left out unless ``--volatile``; versions come before build strings.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from monitor import bounded, jsonsafe
from monitor.cli import common, output
from monitor.config.dburl import mask_url
from monitor.errors import MonitorError
from monitor.runtime import envsnap

Lookup = Callable[[str], Mapping[str, Any] | None]
"""Maps a reference (e.g. a fingerprint) to a snapshot dict, or ``None`` when it does not know it."""


def current_lookup(ref: str) -> Mapping[str, Any] | None:
    """``current`` means a snapshot captured now, in this process."""
    return envsnap.capture().to_dict() if ref == "current" else None


class StoreUnreadable(MonitorError):
    """A fingerprint could not be looked up because the store cannot be read: could not measure (3)."""

    exit_code = 3


HEX = re.compile(r"^[0-9a-fA-F]{4,64}$")
SNAPSHOT_LIMIT = 16 * 1024 * 1024
"""The largest snapshot (or check result) file ``env diff`` reads: a snapshot is a few kilobytes."""


class StoreLookup:
    """Fingerprints (or prefixes) from the store and from baselines on disk; baseline ids from disk.

    The config is read only when a reference is not a file or ``current``, so diffing two files
    works anywhere; a config that cannot be read is reported with the reference that needed it.
    """

    def __init__(self, config_file: str | None) -> None:
        self.config_file = config_file

    def __call__(self, ref: str) -> Mapping[str, Any] | None:
        from monitor.files import baselines

        try:
            settings = common.settings(self.config_file)
        except MonitorError as exc:
            raise MonitorError(f"{ref!r} is not a file or 'current'; looking it up needs the config: {exc}") from None
        root = settings.store.baselines_dir
        if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", ref) and not HEX.match(ref):
            try:
                return dict(baselines.get(root, ref).meta.environment) or None
            except MonitorError:
                return None
        if not HEX.match(ref):
            return None
        prefix = ref.lower()
        found: dict[str, Mapping[str, Any]] = {}
        for model in settings.models:  # the baselines on disk answer even when the store cannot
            for baseline in baselines.list_baselines(root, model.name):
                fingerprint = baseline.meta.environment_fingerprint
                if fingerprint and fingerprint.startswith(prefix) and baseline.meta.environment:
                    found.setdefault(fingerprint, baseline.meta.environment)
        try:
            with common.open_store(settings) as store:
                for record in store.find_environments(prefix, limit=20):
                    found.setdefault(record.fingerprint, record.snapshot)
        except MonitorError:
            raise
        except Exception as exc:  # an unreachable or unmigrated database: say so, exit 3
            if not found:
                first = str(exc).splitlines()[0] if str(exc) else ""
                raise StoreUnreadable(
                    f"{ref!r}: not found in the baselines, and the store {mask_url(settings.store.url)} cannot be"
                    f" read ({type(exc).__name__}: {first[:200]})"
                ) from None
        if len(found) > 1:
            shown = ", ".join(envsnap.short(f) for f in sorted(found)[:5])
            raise MonitorError(f"fingerprint prefix {ref!r} is ambiguous: {shown}; give more digits")
        return next(iter(found.values()), None)


def active_baseline_refs(config_file: str | None, model: str | None) -> list[tuple[str, str, Mapping[str, Any]]]:
    """``(model, baseline id, recorded environment)`` of ``model``'s active baseline, or of every model's.

    With several models and no ``--model``, every model with an active baseline that recorded its
    environment is diffed (the runbook's bare ``onnxmon env diff``); a model without one is skipped
    with a line on stderr. None at all is an error naming why.
    """
    from monitor.files import baselines

    settings = common.settings(config_file)
    if model:
        settings.model(model)  # an unknown name says which names exist
    names = [model] if model else [m.name for m in settings.models]
    if not names:
        raise MonitorError(f"{settings.source}: no models configured; give two references")
    found, missing = [], []
    for name in names:
        baseline = baselines.active(settings.store.baselines_dir, name)
        if baseline is None:
            missing.append(f"model {name!r} has no active baseline under {settings.store.baselines_dir}")
        elif not baseline.meta.environment:
            missing.append(f"baseline {baseline.id} recorded no environment snapshot (in {baseline.directory})")
        else:
            found.append((name, baseline.id, baseline.meta.environment))
    if missing and (not found or model):
        raise MonitorError("; ".join(missing))
    for line in missing:
        typer.echo(f"onnxmon: note: {line}: skipped", err=True)
    return found


def resolve_snapshot(ref: str, lookups: Sequence[Lookup] = ()) -> envsnap.EnvSnapshot:
    """The snapshot ``ref`` names: a JSON file path first, then the first lookup that knows ``ref``."""
    path = Path(ref)
    if os.path.lexists(path) and not HEX.match(ref) and ref != "current":
        # a FIFO, a device or a huge file is refused in one line, never read whole (monitor/bounded.py)
        try:
            data = jsonsafe.loads(bounded.read_text(path, limit=SNAPSHOT_LIMIT))  # its numbers bounded
        except (OSError, ValueError, RecursionError) as exc:
            raise MonitorError(f"{path}: cannot read a JSON snapshot: {exc}") from None
        return _snapshot_from(data, str(path))
    for lookup in lookups:
        found = lookup(ref)
        if found is not None:
            return _snapshot_from(found, ref)
    raise MonitorError(
        f"{ref!r}: no such snapshot; expected a snapshot JSON file, 'current', a baseline id, or a fingerprint"
        " (or a prefix of 4+ hex) known to the store or to a baseline"
    )


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


def format_diff(
    a: envsnap.EnvSnapshot,
    b: envsnap.EnvSnapshot,
    changes: Sequence[envsnap.FieldChange],
    *,
    wide: bool = False,
    hidden: int = 0,
    title: str = "",
) -> str:
    """Human text: both fingerprints (all 64 hex with ``wide``), one line per changed field, then the summary."""
    same = "same fingerprint" if a.fingerprint == b.fingerprint else "fingerprint differs"
    shown = (lambda f: f) if wide else envsnap.short
    lines = [f"{title}{shown(a.fingerprint)} → {shown(b.fingerprint)}: {same}"]
    width = max((len(c.field) for c in changes), default=0)
    for c in changes:
        kind = "stable  " if c.stable else "volatile"
        lines.append(f"  {kind}  {c.field:<{width}}  {envsnap.render(c.old)} → {envsnap.render(c.new)}")
    if hidden:
        lines.append(f"  ({hidden} volatile field(s) changed too, e.g. load and clocks: --volatile shows them)")
    lines.append(envsnap.summary(changes))  # last, so a script can take the last line
    return "\n".join(lines)


def diff_payload(
    first: envsnap.EnvSnapshot, second: envsnap.EnvSnapshot, volatile: bool, model: str | None = None
) -> tuple[dict[str, Any], list[envsnap.FieldChange], int]:
    """The ``-o json`` object of one diff, the changes shown, and how many volatile ones were left out."""
    every = envsnap.diff(first, second)
    changes = every if volatile else [c for c in every if c.stable]
    payload = {
        **({"model": model} if model else {}),
        "a": first.fingerprint,
        "b": second.fingerprint,
        "same_fingerprint": first.fingerprint == second.fingerprint,
        "summary": envsnap.summary(changes),
        "changes": [c.to_dict() for c in changes],
        "volatile_hidden": len(every) - len(changes),
    }
    return payload, changes, len(every) - len(changes)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Show the environment snapshot, or diff two snapshots.", no_args_is_help=True)

    @group.command("show")
    @output.options(reads_config=False)
    def show(
        *,
        out: output.Output,
    ) -> None:
        """Capture this machine's environment and print it, grouped by section, stable vs volatile."""
        snapshot = envsnap.capture()
        out.emit(snapshot.to_dict, lambda wide: envsnap.format_table(snapshot))

    @group.command("diff")
    @output.options()
    def diff(
        a: str | None = typer.Argument(
            None, help="Snapshot JSON file, 'current', baseline id or fingerprint (default: the active baseline)."
        ),
        b: str = typer.Argument("current", help="Snapshot JSON file, 'current', baseline id or fingerprint."),
        model: str | None = typer.Option(
            None, "--model", help="Without A: whose active baseline (default: every configured model's)."
        ),
        volatile: bool = typer.Option(
            False, "--volatile", help="Also list volatile fields (load, clocks, capture time): left out by default."
        ),
        *,
        out: output.Output,
    ) -> None:
        """List the fields that changed from A to B, versions first; exit 1 when the fingerprints differ.

        Without A: each model's active baseline against B (one diff per model when several are
        configured; -o json then prints a list of the per-model objects).
        """
        lookups: list[Lookup] = [current_lookup, StoreLookup(out.config_file)]
        second = resolve_snapshot(b, lookups)
        pairs: list[tuple[str | None, str, envsnap.EnvSnapshot]] = []
        if a is None:
            for name, baseline_id, environment in active_baseline_refs(out.config_file, model):
                pairs.append((name, f"{name} (baseline {baseline_id}): ", _snapshot_from(environment, baseline_id)))
        else:
            pairs.append((None, "", resolve_snapshot(a, lookups)))
        diffs = [(title, first, *diff_payload(first, second, volatile, name)) for name, title, first in pairs]
        several = len(diffs) > 1

        def data() -> Any:
            payloads = [payload for _, _, payload, _, _ in diffs]
            return payloads if several else payloads[0]

        def text(wide: bool) -> str:
            return "\n\n".join(
                format_diff(first, second, changes, wide=wide, hidden=hidden, title=title if several else "")
                for title, first, _, changes, hidden in diffs
            )

        out.emit(data, text)
        if any(first.fingerprint != second.fingerprint for _, first, _, _, _ in diffs):
            raise typer.Exit(1)

    app.add_typer(group, name="env")
