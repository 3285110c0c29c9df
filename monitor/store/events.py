"""State changes between two consecutive runs of one model on one node, as event drafts.

Pure functions over plain values: ``repo`` loads the previous run's state and writes the
drafts. A first run has no previous state; it is treated as "passing, no fallback", so a
model that fails from its very first run still gets a ``verdict_changed`` (old ``None``), and
the first environment or model hash is not a change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from monitor.results import CheckResult, Verdict

VERDICT_CHANGED = "verdict_changed"
ENVIRONMENT_CHANGED = "environment_changed"
MODEL_CHANGED = "model_changed"
BASELINE_CAPTURED = "baseline_captured"
BASELINE_PROMOTED = "baseline_promoted"
PROVIDER_FALLBACK_BEGAN = "provider_fallback_began"
PROVIDER_FALLBACK_ENDED = "provider_fallback_ended"

EVENT_KINDS: frozenset[str] = frozenset(
    {
        VERDICT_CHANGED,
        ENVIRONMENT_CHANGED,
        MODEL_CHANGED,
        BASELINE_CAPTURED,
        BASELINE_PROMOTED,
        PROVIDER_FALLBACK_BEGAN,
        PROVIDER_FALLBACK_ENDED,
    }
)


@dataclass(frozen=True)
class RunState:
    """The parts of a run whose change is an event."""

    verdict: str
    environment_fingerprint: str | None
    model_sha256: str | None
    provider_fallback: bool
    environment: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class EventDraft:
    """An event before it has a row id, model id or run id."""

    kind: str
    old: str | None
    new: str | None
    detail: Mapping[str, Any] = field(default_factory=dict)


def state_of(result: CheckResult) -> RunState:
    """The event-relevant state of a fresh check result."""
    return RunState(
        verdict=result.verdict.value,
        environment_fingerprint=result.environment_fingerprint,
        model_sha256=result.model_sha256,
        provider_fallback=any(r.code == "provider_fallback" for r in result.all_reasons()),
        environment=result.environment,
    )


def changes(previous: RunState | None, current: RunState, result: CheckResult) -> list[EventDraft]:
    """Every state change from ``previous`` (the last run of the same model and node) to ``current``."""
    drafts: list[EventDraft] = []
    if previous is None:
        if current.provider_fallback:
            drafts.append(_fallback_began(result))
        return [*drafts, *_verdict_change(None, current, result)]
    if (
        previous.environment_fingerprint
        and current.environment_fingerprint
        and previous.environment_fingerprint != current.environment_fingerprint
    ):
        diff = snapshot_diff(previous.environment, current.environment)
        if not diff:  # previous snapshot unknown: fall back to the check's diff against its baseline
            diff = [dict(d) for d in result.details.get("env_diff", ())]
        old, new = previous.environment_fingerprint, current.environment_fingerprint
        drafts.append(EventDraft(ENVIRONMENT_CHANGED, old, new, {"diff": diff}))
    if previous.model_sha256 and current.model_sha256 and previous.model_sha256 != current.model_sha256:
        drafts.append(EventDraft(MODEL_CHANGED, previous.model_sha256, current.model_sha256))
    if current.provider_fallback and not previous.provider_fallback:
        drafts.append(_fallback_began(result))
    elif previous.provider_fallback and not current.provider_fallback:
        drafts.append(EventDraft(PROVIDER_FALLBACK_ENDED, None, ",".join(result.providers_effective) or None))
    # the verdict flip comes last: causes (environment, model, providers) before their effect
    return [*drafts, *_verdict_change(previous.verdict, current, result)]


def _verdict_change(old: str | None, current: RunState, result: CheckResult) -> list[EventDraft]:
    if current.verdict == (old or Verdict.PASS.value):
        return []
    reasons = [str(r) for r in result.all_reasons()][:20]
    return [EventDraft(VERDICT_CHANGED, old, current.verdict, {"reasons": reasons})]


def snapshot_diff(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """``[{"field", "old", "new", ...}]``: what changed between two stored environment snapshots.

    Real snapshots (``envsnap`` dicts) are compared with ``envsnap.diff`` and only their
    *stable* fields are kept: those are what changed the fingerprint; volatile ones (load,
    clocks, capture time) would bury the ORT upgrade under noise. Other dicts are compared
    leaf by leaf, nested keys joined with dots.
    """
    if not old or not new:
        return []
    if "fields" in old and "fields" in new:
        from monitor.runtime import envsnap

        changes = envsnap.diff(envsnap.EnvSnapshot.from_dict(old), envsnap.EnvSnapshot.from_dict(new))
        stable = [dict(c.to_dict()) for c in changes if c.stable]
        return stable or [dict(c.to_dict()) for c in changes]
    flat_old, flat_new = _flatten(old), _flatten(new)
    fields = sorted((set(flat_old) | set(flat_new)) - {"fingerprint"})
    return [
        {"field": name, "old": flat_old.get(name), "new": flat_new.get(name)}
        for name in fields
        if flat_old.get(name) != flat_new.get(name)
    ]


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _fallback_began(result: CheckResult) -> EventDraft:
    details = [r.detail for r in result.all_reasons() if r.code == "provider_fallback"]
    return EventDraft(
        PROVIDER_FALLBACK_BEGAN,
        ",".join(result.providers_requested) or None,
        ",".join(result.providers_effective) or None,
        {"detail": details},
    )
