"""Environment pages: one snapshot grouped by section (``/environments/{fingerprint}``) and a diff of two.

Stable fields (the ones in the fingerprint, the ones that can change numbers) are highlighted;
volatile ones are recorded for context only. Look-ups reuse the API's: a fingerprint, a unique
prefix of one (4 hex digits at least), or a baseline id (its recorded environment); an environment
that only a baseline's files recorded (never run in this store) is shown from them, saying so. The pages are
``templates/environment.html`` and ``templates/environment_diff.html``; a diff as the run page
shows it too is ``templates/envdiff.html``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException

from monitor import jsonsafe
from monitor.api import environments
from monitor.api.schemas import EnvDiff
from monitor.api.web import templating
from monitor.runtime import envsnap

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle

# Same grouping as ``envsnap.format_table``: python packages under python, NVML under gpu, k8s under host.
_SECTIONS = {"numpy": "python", "onnx": "python", "onnxmon": "python", "nvml": "gpu", "k8s": "host"}
_REF_MAX = 200


@dataclass(frozen=True)
class FieldLine:
    """A field of a snapshot, or a changed field of a diff (``old`` and ``new``: None when absent)."""

    name: str
    stable: bool
    value: str = ""
    old: str | None = None
    new: str | None = None


@dataclass(frozen=True)
class DiffView:
    summary: str
    note: str | None
    changes: list[FieldLine]

    @property
    def stable_count(self) -> int:
        return sum(1 for c in self.changes if c.stable)


class NotFound(Exception):
    """A page that cannot be shown: its HTTP status and a message for people."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def render_environment(handle: DaemonHandle, fingerprint: str, now: datetime) -> str:
    if not re.fullmatch(environments.HEX_PREFIX, fingerprint):
        raise NotFound(404, f"{fingerprint!r} is not an environment fingerprint (4 to 64 hex digits)")
    try:
        record = environments.find_environment(handle, fingerprint)
    except HTTPException as exc:
        raise NotFound(exc.status_code, str(exc.detail)) from None
    snapshot = _snapshot(record.snapshot)
    fields: Mapping[str, envsnap.Field] = snapshot.fields if snapshot is not None else {}
    captured = jsonsafe.epoch(record.snapshot.get("captured_at") or 0.0)  # RFC 3339 now, epoch seconds before
    short = envsnap.short(record.fingerprint)
    raw = jsonsafe.dumps(dict(record.snapshot), indent=2, sort_keys=True, default=str) if snapshot is None else None
    recorded_by = [found.baseline_ids for found in environments.on_disk(handle, record.fingerprint)]
    return templating.render(
        "environment.html",
        title=f"Environment {short}",
        crumbs=[("Models", "/"), ("Environments", None), (short, None)],
        now=now,
        record=record,
        short=short,
        baselines=[baseline_id for ids in recorded_by for baseline_id in ids],
        in_store=handle.store.environment(record.fingerprint) is not None,
        captured=datetime.fromtimestamp(captured, UTC) if captured else None,
        field_count=len(fields),
        stable_count=sum(1 for f in fields.values() if f.stable),
        raw=raw,
        groups=_grouped(fields),
    )


def render_diff(handle: DaemonHandle, a: str | None, b: str | None) -> str:
    crumbs = [("Models", "/"), ("Environments", None), ("Compare", None)]
    if not a or not b:
        return templating.render(
            "environment_diff.html", title="Compare environments", crumbs=crumbs, a=a or "", b=b or "", found=None
        )
    if len(a) > _REF_MAX or len(b) > _REF_MAX:
        raise NotFound(404, "an environment reference is at most 200 characters")
    try:
        fp_a, snap_a = environments.resolve_environment(handle, a)
        fp_b, snap_b = environments.resolve_environment(handle, b)
    except HTTPException as exc:
        raise NotFound(exc.status_code, str(exc.detail)) from None
    return templating.render(
        "environment_diff.html",
        title="Environment diff",
        crumbs=crumbs,
        a=a,
        b=b,
        named=[(fp_a, _baseline_ref(a, fp_a)), (fp_b, _baseline_ref(b, fp_b))],
        found=diff_view(environments.diff(fp_a, snap_a, fp_b, snap_b)),
    )


def diff_view(found: EnvDiff) -> DiffView:
    """A diff as the pages show it side by side: stable changes first (as the API orders them)."""
    changes = [FieldLine(c.field, c.stable, old=_value(c.old), new=_value(c.new)) for c in found.changes]
    return DiffView(found.summary, found.note, changes)


def _baseline_ref(ref: str, fingerprint: str | None) -> str | None:
    """The reference given when it was not the fingerprint (a baseline id), else None."""
    return None if fingerprint and fingerprint.startswith(ref.lower()) else ref


def _value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "[]"
    return str(value)


def _snapshot(data: Mapping[str, Any]) -> envsnap.EnvSnapshot | None:
    try:
        return envsnap.EnvSnapshot.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _section(name: str) -> str:
    head = name.split(".", 1)[0]
    return _SECTIONS.get(head, head)


def _grouped(fields: Mapping[str, envsnap.Field]) -> list[tuple[str, list[FieldLine]]]:
    groups: dict[str, list[FieldLine]] = {}
    for name, field in sorted(fields.items(), key=lambda item: (_section(item[0]), item[0])):
        groups.setdefault(_section(name), []).append(FieldLine(name, field.stable, value=envsnap.render(field.value)))
    return list(groups.items())
