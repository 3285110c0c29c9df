"""The overview page (``/``): every configured model, failing ones first, with where it stands.

One row per model: its last verdict and, when that is not a pass, why (``Why``: the run's reasons, the
outputs they belong to, its attribution and the likely cause its diagnosis names, as ``onnxmon check``
prints them), how long since it last passed, a sparkline of its recent error ÷ tolerance
(``error_ratio``), whether its latest run ran in the environment of its active baseline, and that
baseline's id and age (``templates/overview.html``). The table fits a 1400-pixel window unscrolled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from monitor.api.environments import run_env_diff
from monitor.api.web import events, lookup, templating
from monitor.api.web.formats import url
from monitor.api.web.svg import Spark, sparkline
from monitor.diagnose.result import Diagnosis
from monitor.runtime import envsnap
from monitor.store import RunRecord, incidents

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle

SPARK_RUNS = 30
RECENT_EVENTS = 12
HISTORY_RUNS = 200  # how far back "last success" looks
_ORDER = {"fail": 0, "error": 1, None: 2, "pass": 3}
WHY_CHARS = 160  # a reason's detail or a cause line in the cell; the whole of it is the cell's title


@dataclass(frozen=True)
class Badge:
    """A coloured pill (``kind``: ok, bad, warn, info, none), linked when ``href`` is set."""

    text: str
    kind: str
    title: str = ""
    href: str = ""


@dataclass(frozen=True)
class Rehearsal:
    """The newest candidate run (``onnxmon rehearse``): shown beside production's, never as it."""

    run_id: int
    verdict: str
    finished_at: datetime


@dataclass(frozen=True)
class Why:
    """Why the latest run did not pass: its reasons (check-level first, each output's named), how the
    check attributed it, and the likely cause its diagnosis names; each line short, ``title`` all of it."""

    reasons: str
    attribution: str | None
    cause: str
    title: str


@dataclass(frozen=True)
class Row:
    name: str
    verdict: str | None
    run_id: int | None  # the latest run's
    finished_at: datetime | None
    fingerprint: str | None
    worst_output: str | None
    error_ratio: float | None
    last_success: datetime | None
    spark: Spark | None
    environment: Badge
    why: Why | None
    baseline_id: str | None
    baseline_created: datetime | None
    rehearsal: Rehearsal | None


def render(handle: DaemonHandle, now: datetime) -> str:
    settings = handle.settings
    rows = sorted((_row(handle, m.name) for m in settings.models), key=lambda r: (_ORDER[r.verdict], r.name))
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in ("fail", "error", "pass")}
    summary = [
        Badge(f"{n} {label}", kind)
        for n, label, kind in (
            (counts["fail"], "failing", "bad"),
            (counts["error"], "erroring", "warn"),
            (counts["pass"], "passing", "ok"),
        )
        if n
    ]
    return templating.render(
        "overview.html",
        title="Models",
        crumbs=[("Models", None)],
        refresh_s=60,
        now=now,
        summary=summary,
        rows=rows,
        spark_runs=SPARK_RUNS,
        events=events.rows(handle.store.events(limit=RECENT_EVENTS)),
        retired=sorted(set(handle.store.models()) - {m.name for m in settings.models}),
    )


def _row(handle: DaemonHandle, name: str) -> Row:
    runs = handle.store.runs(name, limit=HISTORY_RUNS)
    latest = runs[0] if runs else None
    baseline_id, meta = lookup.active_baseline(handle.settings.store.baselines_dir, name)
    rehearsed = handle.store.runs(name, limit=1, candidates=True)
    return Row(
        name=name,
        verdict=latest.verdict.value if latest is not None else None,
        run_id=latest.id if latest is not None else None,
        finished_at=latest.finished_at if latest is not None else None,
        fingerprint=latest.environment_fingerprint if latest is not None else None,
        worst_output=latest.worst_output if latest is not None else None,
        error_ratio=latest.error_ratio if latest is not None else None,
        last_success=next((r.finished_at for r in runs if r.verdict == "pass"), None),
        spark=sparkline(lookup.points(runs[:SPARK_RUNS])),
        environment=_environment(handle, latest, baseline_id, meta.environment_fingerprint if meta else None),
        why=_why(handle, latest),
        baseline_id=baseline_id,
        baseline_created=lookup.created_at(meta),
        rehearsal=Rehearsal(rehearsed[0].id, rehearsed[0].verdict.value, rehearsed[0].finished_at)
        if rehearsed
        else None,
    )


def _environment(
    handle: DaemonHandle, latest: RunRecord | None, baseline_id: str | None, baseline_fp: str | None
) -> Badge:
    if latest is not None and baseline_id is not None and baseline_fp is None:
        return Badge("not recorded", "none", title=f"the active baseline {baseline_id} recorded no environment")
    if latest is None or not latest.environment_fingerprint or not baseline_fp:
        return Badge("unknown", "none", title="no run or no baseline environment to compare")
    if latest.environment_fingerprint == baseline_fp:
        return Badge("matches baseline", "ok", title=f"environment {envsnap.short(baseline_fp)}")
    href = url("environments", "diff", a=baseline_fp, b=latest.environment_fingerprint)
    return Badge("differs", "warn", title=run_env_diff(handle, latest).summary, href=href)


def _why(handle: DaemonHandle, latest: RunRecord | None) -> Why | None:
    """What the overview says under a fail or an error; None for a pass or no run."""
    if latest is None or latest.verdict.value == "pass":
        return None
    loaded = handle.store.run(latest.id)  # with its outputs' reasons (a record is falsy unless it passed)
    full = loaded if loaded is not None else latest
    reasons = list(full.all_reasons())
    shown = _short("; ".join(_reason(r.code, r.output, r.detail, latest.verdict.value) for r in reasons))
    cause = _cause(handle, latest)
    attribution = [f"attribution: {latest.attribution}"] if latest.attribution else []
    title = "\n".join([*(str(r) for r in reasons), *attribution, *([cause] if cause else [])])
    return Why(shown or "no reason recorded", latest.attribution, _short(cause), title)


def _reason(code: str, output: str | None, detail: str, verdict: str) -> str:
    """A fail's reason by its code (and output); an error's with its detail, the code alone says too little."""
    where = f" ({output})" if output else ""
    return f"{code}{where}: {detail}" if verdict == "error" and detail else f"{code}{where}"


def _cause(handle: DaemonHandle, run: RunRecord) -> str:
    """The likely-cause line of the run's diagnosis (the daemon's stored one, else the check's own), or ""."""
    document: Any = incidents.diagnosis(handle.store, run.id) or run.details.get("diagnosis")
    if not isinstance(document, Mapping) or "hypotheses" not in document:
        return ""
    try:
        return Diagnosis.from_dict(document).headline()
    except (KeyError, TypeError, ValueError):
        return ""


def _short(text: str) -> str:
    return text if len(text) <= WHY_CHARS else text[: WHY_CHARS - 1] + "…"
