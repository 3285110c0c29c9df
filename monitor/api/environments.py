"""Environment look-ups and diffs behind the API: fingerprints, prefixes, baseline ids, a run against its baseline.

Snapshots come from the store (``Store.environment``) and from the baselines' metadata on disk: an
environment known only from a baseline's files (a committed baseline captured on another machine, whose
environment this store never ran in) is found by its fingerprint as ``onnxmon env diff`` finds it, so
every link the pages make to a baseline's environment resolves. The diff itself is ``envsnap.diff``.
A snapshot that is missing or not in ``EnvSnapshot`` form gives an empty diff with a ``note`` saying
why, never an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException

from monitor.api import schemas
from monitor.errors import MonitorError
from monitor.files import baseline_meta, baselines
from monitor.runtime import envsnap
from monitor.store import EnvironmentRecord, RunRecord

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle

NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
HEX_PREFIX = r"^[0-9a-fA-F]{4,64}$"


def find_environment(handle: DaemonHandle, prefix: str) -> EnvironmentRecord:
    """The environment whose fingerprint is (or starts with) ``prefix``: from the store, else from the
    baselines on disk (``first_seen``/``last_seen``: when the first and last of them were captured).
    404 when neither knows it, 409 when the prefix names more than one."""
    prefix = prefix.lower()
    found = {e.fingerprint: e for e in handle.store.find_environments(prefix, limit=20)}
    if prefix in found:  # a whole fingerprint the store knows: no need to read the baselines
        return found[prefix]
    for recorded in on_disk(handle, prefix):
        found.setdefault(recorded.fingerprint, recorded.record)
    if prefix in found:
        return found[prefix]
    if not found:
        raise HTTPException(404, f"no environment with fingerprint {prefix!r} in the store or the baselines")
    if len(found) > 1:
        shown = ", ".join(envsnap.short(f) for f in sorted(found)[:5])
        raise HTTPException(409, f"fingerprint prefix {prefix!r} is ambiguous: {shown}; give more digits")
    return next(iter(found.values()))


@dataclass(frozen=True)
class OnDisk:
    """An environment as the baselines on disk recorded it: its snapshot and the baselines that did."""

    fingerprint: str
    snapshot: Mapping[str, Any]
    baseline_ids: tuple[str, ...]
    captured: tuple[datetime, ...]

    @property
    def record(self) -> EnvironmentRecord:
        return EnvironmentRecord(self.fingerprint, self.snapshot, min(self.captured), max(self.captured))


def on_disk(handle: DaemonHandle, prefix: str) -> list[OnDisk]:
    """Every environment a configured model's baseline on disk recorded whose fingerprint starts with ``prefix``.

    A model whose baselines cannot be read is passed over (its own pages say why), never failing the look-up.
    """
    found: dict[str, list[baseline_meta.BaselineMeta]] = {}
    root = handle.settings.store.baselines_dir
    for model in handle.settings.models:
        try:
            metas = [b.meta for b in baselines.list_baselines(root, model.name)]
        except (MonitorError, OSError, ValueError):
            continue
        for meta in metas:
            fingerprint = meta.environment_fingerprint
            if fingerprint and fingerprint.startswith(prefix) and meta.environment:
                found.setdefault(fingerprint, []).append(meta)
    return [
        OnDisk(
            fingerprint,
            dict(metas[0].environment),
            tuple(m.id for m in metas),
            tuple(datetime.fromtimestamp(baseline_meta.created_seconds(m.created_at), UTC) for m in metas),
        )
        for fingerprint, metas in sorted(found.items())
    ]


def resolve_environment(handle: DaemonHandle, ref: str) -> tuple[str | None, dict[str, Any] | None]:
    """``current`` (this process's environment, captured now), a fingerprint (prefix) from the store,
    else a baseline id (its recorded environment)."""
    if ref == "current":
        snapshot = envsnap.capture()
        return snapshot.fingerprint, dict(snapshot.to_dict())
    if re.fullmatch(HEX_PREFIX, ref):
        prefix = ref.lower()
        if handle.store.find_environments(prefix, limit=1) or on_disk(handle, prefix):
            record = find_environment(handle, ref)
            return record.fingerprint, dict(record.snapshot)
    if re.fullmatch(NAME, ref):
        try:
            meta = baselines.get(handle.settings.store.baselines_dir, ref).meta
        except MonitorError:
            meta = None
        if meta is not None:
            return meta.environment_fingerprint, dict(meta.environment) or None
    raise HTTPException(404, f"{ref!r} is neither a known environment fingerprint nor a baseline id")


def diff(
    fp_a: str | None, snap_a: dict[str, Any] | None, fp_b: str | None, snap_b: dict[str, Any] | None
) -> schemas.EnvDiff:
    if not snap_a or not snap_b:
        missing = "a" if not snap_a else "b"
        return schemas.EnvDiff(
            a=fp_a, b=fp_b, summary="unknown", changes=[], note=f"no snapshot recorded for {missing}"
        )
    try:
        changes = envsnap.diff(envsnap.EnvSnapshot.from_dict(snap_a), envsnap.EnvSnapshot.from_dict(snap_b))
    except (KeyError, TypeError, ValueError, AttributeError):
        return schemas.EnvDiff(
            a=fp_a, b=fp_b, summary="unknown", changes=[], note="a snapshot is not in a comparable form"
        )
    return schemas.EnvDiff(
        a=fp_a,
        b=fp_b,
        summary=envsnap.summary(changes),
        changes=[schemas.FieldChangeOut(**schemas.json_safe(c.to_dict())) for c in changes],
    )


def run_env_diff(handle: DaemonHandle, run: RunRecord) -> schemas.EnvDiff:
    """The run's environment against its baseline's: from the store's snapshots, else the check's own diff."""
    base_fp, base_snap = None, None
    if run.baseline_id:
        recorded = {b.baseline_id: b for b in handle.store.baseline_history(run.model)}.get(run.baseline_id)
        base_fp = recorded.environment_fingerprint if recorded is not None else None
        base_snap = handle.store.environment(base_fp) if base_fp else None
        if base_snap is None:
            try:
                meta = baselines.get(handle.settings.store.baselines_dir, run.baseline_id).meta
                base_fp, base_snap = meta.environment_fingerprint, dict(meta.environment) or None
            except MonitorError:
                pass
    run_snap = handle.store.environment(run.environment_fingerprint) if run.environment_fingerprint else None
    found = diff(base_fp, base_snap, run.environment_fingerprint, run_snap)
    if found.note and isinstance(run.details.get("env_diff"), list):
        changes = [
            schemas.FieldChangeOut(**schemas.json_safe(c)) for c in run.details["env_diff"] if isinstance(c, dict)
        ]
        summary = envsnap.summary([envsnap.FieldChange(c.field, c.old, c.new, c.stable) for c in changes])
        note = "from the check's own comparison (snapshots not in the store)"
        return schemas.EnvDiff(a=base_fp, b=run.environment_fingerprint, summary=summary, changes=changes, note=note)
    if not run.baseline_id:
        return schemas.EnvDiff(
            a=None, b=run.environment_fingerprint, summary="unknown", changes=[], note="run has no baseline"
        )
    return found
