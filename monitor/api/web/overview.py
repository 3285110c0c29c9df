"""The overview page (``/``): every configured model, failing ones first, with where it stands.

One row per model: its last verdict, how long since it last passed, a sparkline of its recent
error ÷ tolerance (``error_ratio``), whether its latest run ran in the environment of its active baseline,
and that baseline's id and age.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from monitor.api.environments import run_env_diff
from monitor.api.web import lookup
from monitor.api.web.events import events_table
from monitor.api.web.html import ago, badge, esc, fingerprint_link, link, num, page, section, table, url, verdict_badge
from monitor.api.web.svg import sparkline
from monitor.runtime import envsnap
from monitor.store import RunRecord

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle

SPARK_RUNS = 30
RECENT_EVENTS = 12
HISTORY_RUNS = 200  # how far back "last success" looks
_ORDER = {"fail": 0, "error": 1, None: 2, "pass": 3}


@dataclass(frozen=True)
class _Row:
    name: str
    latest: RunRecord | None
    last_success: datetime | None
    recent: list[RunRecord]
    baseline_id: str | None
    baseline_created: datetime | None
    environment: str
    rehearsal: RunRecord | None = None
    """The newest candidate run (``onnxmon rehearse``): shown beside production's, never as it."""

    @property
    def verdict(self) -> str | None:
        return self.latest.verdict.value if self.latest is not None else None


def render(handle: DaemonHandle, now: datetime) -> str:
    settings = handle.settings
    rows = sorted((_row(handle, m.name) for m in settings.models), key=lambda r: (_ORDER[r.verdict], r.name))
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in ("fail", "error", "pass")}
    summary = " ".join(
        badge(f"{n} {label}", kind)
        for n, label, kind in (
            (counts["fail"], "failing", "bad"),
            (counts["error"], "erroring", "warn"),
            (counts["pass"], "passing", "ok"),
        )
        if n
    )
    headers = [
        "Model",
        "Verdict",
        "Last run",
        "Last success",
        f"error ÷ tolerance (last {SPARK_RUNS})",
        "Environment",
        "Active baseline",
        "Baseline age",
        "Rehearsal",
    ]
    body = [
        f"<h1>Models {summary}</h1>",
        f'<p class="sub">{len(rows)} configured model(s); the page refreshes every minute.</p>',
        section(
            "Where every model stands", table(headers, (_cells(r, now) for r in rows), empty="no models configured")
        ),
    ]
    recent = handle.store.events(limit=RECENT_EVENTS)
    body.append(section("Recent changes", events_table(recent, now, with_model=True)))
    retired = sorted(set(handle.store.models()) - {m.name for m in settings.models})
    if retired:
        links = ", ".join(link(url("models", name), name) for name in retired)
        body.append(section("History of models no longer configured", f"<p>{links}</p>"))
    return page("Models", "".join(body), crumbs=[("Models", None)], refresh_s=60)


def _row(handle: DaemonHandle, name: str) -> _Row:
    runs = handle.store.runs(name, limit=HISTORY_RUNS)
    latest = runs[0] if runs else None
    last_success = next((r.finished_at for r in runs if r.verdict == "pass"), None)
    baseline_id, meta = lookup.active_baseline(handle.settings.store.baselines_dir, name)
    rehearsed = handle.store.runs(name, limit=1, candidates=True)
    return _Row(
        rehearsal=rehearsed[0] if rehearsed else None,
        name=name,
        latest=latest,
        last_success=last_success,
        recent=runs[:SPARK_RUNS],
        baseline_id=baseline_id,
        baseline_created=lookup.created_at(meta),
        environment=_environment_badge(handle, latest, meta.environment_fingerprint if meta else None),
    )


def _environment_badge(handle: DaemonHandle, latest: RunRecord | None, baseline_fp: str | None) -> str:
    if latest is None or not latest.environment_fingerprint or not baseline_fp:
        return badge("unknown", "none", title="no run or no baseline environment to compare")
    if latest.environment_fingerprint == baseline_fp:
        return badge("matches baseline", "ok", title=f"environment {envsnap.short(baseline_fp)}")
    changes = run_env_diff(handle, latest).summary
    href = url("environments", "diff", a=baseline_fp, b=latest.environment_fingerprint)
    return f'<a href="{esc(href)}">{badge("differs", "warn", title=changes)}</a>'


def _cells(row: _Row, now: datetime) -> list[str]:
    latest = row.latest
    worst = ""
    if latest is not None and latest.worst_output:
        ratio = num(latest.error_ratio)
        worst = f'<div class="muted">worst: {esc(latest.worst_output)}; error ÷ tolerance {esc(ratio)}</div>'
    last_run = (
        link(url("runs", str(latest.id)), ago(latest.finished_at, now), title=f"run #{latest.id}")
        if latest is not None
        else '<span class="muted">never</span>'
    )
    success = (
        ago(row.last_success, now) if row.last_success else "none in the last runs" if latest is not None else "never"
    )
    baseline = (
        f'<span class="mono">{esc(row.baseline_id)}</span>' if row.baseline_id else '<span class="muted">none</span>'
    )
    return [
        f"<strong>{link(url('models', row.name), row.name)}</strong>",
        verdict_badge(row.verdict),
        last_run,
        esc(success) if row.last_success or latest is None else f'<span class="muted">{esc(success)}</span>',
        sparkline(lookup.points(row.recent)) + worst,
        row.environment
        + (f"<div>{fingerprint_link(latest.environment_fingerprint)}</div>" if latest is not None else ""),
        baseline,
        esc(ago(row.baseline_created, now)) if row.baseline_created else '<span class="muted">—</span>',
        _rehearsal(row.rehearsal, now),
    ]


def _rehearsal(run: RunRecord | None, now: datetime) -> str:
    """The newest rehearsal's verdict (go when it passed), linked to its run; a dash when none was made."""
    if run is None:
        return '<span class="muted">—</span>'
    go = "go" if run.verdict.value == "pass" else "no-go"
    label = f"{go} ({ago(run.finished_at, now)})"
    return link(url("runs", str(run.id)), label, title=f"candidate run #{run.id}: {run.verdict.value}")
