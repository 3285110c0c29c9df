"""Environment pages: one snapshot grouped by section (``/environments/{fingerprint}``) and a diff of two.

Stable fields (the ones in the fingerprint, the ones that can change numbers) are highlighted;
volatile ones are recorded for context only. Look-ups reuse the API's: a fingerprint, a unique
prefix of one (4 hex digits at least), or a baseline id (its recorded environment).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException

from monitor import jsonsafe
from monitor.api import environments
from monitor.api.schemas import EnvDiff
from monitor.api.web.html import badge, esc, facts, fingerprint_link, page, section, url, when
from monitor.runtime import envsnap

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle

# Same grouping as ``envsnap.format_table``: python packages under python, NVML under gpu, k8s under host.
_SECTIONS = {"numpy": "python", "onnx": "python", "onnxmon": "python", "nvml": "gpu", "k8s": "host"}
_REF_MAX = 200


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
    stable = sum(1 for f in fields.values() if f.stable)
    captured = jsonsafe.epoch(record.snapshot.get("captured_at") or 0.0)  # RFC 3339 now, epoch seconds before
    summary = facts(
        [
            ("fingerprint", f'<span class="mono">{esc(record.fingerprint)}</span>'),
            ("first seen", when(record.first_seen, now)),
            ("last seen", when(record.last_seen, now)),
            ("captured", when(datetime.fromtimestamp(captured, UTC), now) if captured else "—"),
            ("fields", esc(f"{len(fields)} ({stable} stable, {len(fields) - stable} volatile)")),
        ]
    )
    body = [
        f'<h1>Environment <span class="mono">{esc(envsnap.short(record.fingerprint))}</span></h1>',
        '<p class="sub">Stable fields (highlighted) make up the fingerprint; volatile ones are context.</p>',
        '<div class="grid">',
        section("Snapshot", summary),
        section("Compare with", _compare_form(record.fingerprint, "")),
        "</div>",
    ]
    if snapshot is None:
        raw = esc(jsonsafe.dumps(dict(record.snapshot), indent=2, sort_keys=True, default=str))
        body.append(section("Fields", f'<p class="muted">not in snapshot form</p><pre class="mono">{raw}</pre>'))
    for name, group in _grouped(fields):
        rows = (
            (
                f'<span class="mono">{esc(key)}</span>',
                f'<span class="mono">{esc(envsnap.render(field.value))}</span>',
                badge("stable", "info") if field.stable else badge("volatile", "none"),
            )
            for key, field in group
        )
        body.append(section(name, _rows_marked(["Field", "Value", "Kind"], rows, [f.stable for _, f in group])))
    crumbs = [("Models", "/"), ("Environments", None), (envsnap.short(record.fingerprint), None)]
    return page(f"Environment {envsnap.short(record.fingerprint)}", "".join(body), crumbs=crumbs)


def render_diff(handle: DaemonHandle, a: str | None, b: str | None) -> str:
    crumbs = [("Models", "/"), ("Environments", None), ("Compare", None)]
    form = section("Compare two environments", _compare_form(a or "", b or ""))
    if not a or not b:
        intro = '<h1>Compare environments</h1><p class="sub">Give two fingerprints (or prefixes) or baseline ids.</p>'
        return page("Compare environments", intro + form, crumbs=crumbs)
    if len(a) > _REF_MAX or len(b) > _REF_MAX:
        raise NotFound(404, "an environment reference is at most 200 characters")
    try:
        fp_a, snap_a = environments.resolve_environment(handle, a)
        fp_b, snap_b = environments.resolve_environment(handle, b)
    except HTTPException as exc:
        raise NotFound(exc.status_code, str(exc.detail)) from None
    found = environments.diff(fp_a, snap_a, fp_b, snap_b)
    body = [
        "<h1>Environment diff</h1>",
        f'<p class="sub">A: {_named(a, fp_a)} → B: {_named(b, fp_b)}</p>',
        section("What changed", diff_view(found, "A", "B")),
        form,
    ]
    return page("Environment diff", "".join(body), crumbs=crumbs)


def diff_view(found: EnvDiff, old_label: str, new_label: str) -> str:
    """A diff side by side (``old_label`` | ``new_label``), stable changes first and highlighted."""
    headline = f"<p><strong>{esc(found.summary)}</strong></p>"
    if found.note:
        headline += f'<p class="muted">{esc(found.note)}</p>'
    if not found.changes:
        return headline + '<p class="muted">no field differs</p>'
    rows = (
        (
            f'<span class="mono">{esc(c.field)}</span>',
            _value(c.old),
            _value(c.new),
            badge("stable", "info") if c.stable else badge("volatile", "none"),
        )
        for c in found.changes
    )
    stable = [c.stable for c in found.changes]
    counts = f'<p class="muted">{sum(stable)} stable and {len(stable) - sum(stable)} volatile field(s) differ.</p>'
    return headline + counts + _rows_marked(["Field", old_label, new_label, "Kind"], rows, stable, diff=True)


def _named(ref: str, fingerprint: str | None) -> str:
    """The environment's link, with the reference given when it was not the fingerprint (a baseline id)."""
    given = "" if fingerprint and fingerprint.startswith(ref.lower()) else f" (baseline {esc(ref)})"
    return fingerprint_link(fingerprint) + given


def _value(value: Any) -> str:
    if value is None:
        return '<span class="muted">absent</span>'
    if isinstance(value, list):
        return f'<span class="mono">{esc(", ".join(str(v) for v in value) or "[]")}</span>'
    return f'<span class="mono">{esc(value)}</span>'


def _rows_marked(
    headers: Sequence[str], rows: Iterable[Sequence[str]], stable: Sequence[bool], diff: bool = False
) -> str:
    """A table whose stable rows carry the ``stable`` class (highlighted); diff tables colour old and new."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    lines = []
    for row, is_stable in zip(rows, stable, strict=True):
        cells = []
        for index, cell in enumerate(row):
            css = ' class="old"' if diff and index == 1 else ' class="new"' if diff and index == 2 else ""
            cells.append(f"<td{css}>{cell}</td>")
        lines.append(f'<tr class="{"stable" if is_stable else "volatile"}">{"".join(cells)}</tr>')
    return f'<table class="env"><thead><tr>{head}</tr></thead><tbody>{"".join(lines)}</tbody></table>'


def _compare_form(a: str, b: str) -> str:
    return (
        f'<form class="inline" method="get" action="{url("environments", "diff")}">'
        f'<input name="a" value="{esc(a)}" placeholder="fingerprint or baseline id" aria-label="a" maxlength="200">'
        f'<span class="muted">→</span>'
        f'<input name="b" value="{esc(b)}" placeholder="fingerprint or baseline id" aria-label="b" maxlength="200">'
        '<button type="submit">Compare</button></form>'
    )


def _snapshot(data: Mapping[str, Any]) -> envsnap.EnvSnapshot | None:
    try:
        return envsnap.EnvSnapshot.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _section(name: str) -> str:
    head = name.split(".", 1)[0]
    return _SECTIONS.get(head, head)


def _grouped(fields: Mapping[str, envsnap.Field]) -> list[tuple[str, list[tuple[str, envsnap.Field]]]]:
    groups: dict[str, list[tuple[str, envsnap.Field]]] = {}
    for name, field in sorted(fields.items(), key=lambda item: (_section(item[0]), item[0])):
        groups.setdefault(_section(name), []).append((name, field))
    return list(groups.items())
