"""What the metrics remember of each configured model between scrapes, read from the config, the disk and the store.

``counters.Metrics`` counts; this module knows the models. ``ModelStates.declare`` reads, for one
model of a (re)loaded config: its file's facts (sha256, opset; read again only when the file's
stamp moves), its active baseline on disk (``active_baselines.py``), its schedule, and at start its
last run in the store (environment, baseline, provider fallback, last success). The outputs that
label its series come from the config's per-output tolerance overrides, the active baseline's
outputs (or the model graph's when there is none) and the store's last run. ``Metrics`` holds the
lock; every method here is called under it.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from monitor.config.settings import ModelConfig, Settings
from monitor.files import baseline_meta, stamped
from monitor.results import Verdict
from monitor.sinks.prometheus import label_values, model_facts
from monitor.sinks.prometheus.active_baselines import ActiveBaselines
from monitor.store import RunRecord, Store

log = logging.getLogger(__name__)


@dataclass
class ModelState:
    """What the process remembers of one configured model between scrapes (guarded by ``Metrics``' lock)."""

    outputs: list[str] = field(default_factory=list)
    interval: float = math.nan
    facts: model_facts.ModelFacts = field(default_factory=model_facts.ModelFacts)
    facts_signature: stamped.Stamp | None = None
    last_success: float = 0.0
    fallback: float = 0.0
    fingerprint: str | None = None
    baseline_id: str | None = None
    reasons_seen: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Declared:
    """What one ``declare`` found for a model: its state, and what the counters must follow."""

    state: ModelState
    promoted: bool
    """A new active baseline of a model already known (not at start): one more promotion."""
    gone_outputs: frozenset[str]
    """Outputs that labelled the model's series and no longer do."""


class ModelStates:
    """Each configured model's ``ModelState``, by name, in config order."""

    def __init__(self, store: Store | None, node: str | None) -> None:
        self.store, self.node = store, node
        self.by_name: dict[str, ModelState] = {}
        self._baselines = ActiveBaselines()

    def declare(self, settings: Settings, model: ModelConfig, last: RunRecord | None, first: bool) -> Declared:
        """Read ``model``'s facts, active baseline, schedule and outputs now (``last``: its last run in the store)."""
        state = self.by_name.get(model.name)
        new = state is None
        state = state or ModelState()
        self.by_name[model.name] = state
        signature = stamped.stamp([model.path])
        if new or signature != state.facts_signature:
            state.facts, state.facts_signature = model_facts.read_model_facts(model.path), signature
        meta = self._baselines.meta(settings.store.baselines_dir, model.name)
        active = meta.id if meta else None
        promoted = not new and not first and bool(active) and active != state.baseline_id
        state.baseline_id = active or state.baseline_id
        wanted = list(model.tolerance.outputs)
        wanted += list(meta.outputs) if meta else list(state.facts.outputs)
        wanted += [o.name for o in last.outputs] if last is not None else []
        outputs = list(dict.fromkeys(wanted))
        gone = frozenset(state.outputs) - frozenset(outputs)
        state.outputs = outputs
        state.interval = settings.schedule_for(model).longest_gap_seconds()
        if new and last is not None:
            state.fingerprint = last.environment_fingerprint
            state.baseline_id = state.baseline_id or last.baseline_id
            fallback = label_values.provider_fallback(last.providers_requested, last.providers_effective, last.reasons)
            state.fallback = fallback if fallback is not None else 0.0
            state.last_success = self._last_success_from_store(model.name, last)
        return Declared(state, promoted, gone)

    def forget(self, model: str) -> ModelState:
        """Drop a model that left the config; its last state (for the series to remove)."""
        return self.by_name.pop(model)

    def copies(self) -> dict[str, ModelState]:
        """A copy of every state, in config order, that a scrape can read without the lock."""
        return {name: _copy(state) for name, state in self.by_name.items()}

    def active_baseline(self, root: Path, model: str) -> baseline_meta.BaselineMeta | None:
        """The active baseline's metadata (``active_baselines.py``: ACTIVE re-read when it moves)."""
        return self._baselines.meta(root, model)

    def latest_runs(self) -> list[RunRecord]:
        """Every model's last runs in the store; none when there is no store or it is down at start-up."""
        if self.store is None:
            return []
        try:
            return self.store.latest_per_model()
        except Exception as exc:  # the store may be down at start-up; series still get declared
            log.warning("store unreachable while declaring metrics: %s", exc)
            return []

    def _last_success_from_store(self, model: str, last: RunRecord) -> float:
        if last.verdict is Verdict.PASS:
            return last.finished_at.timestamp()
        if self.store is None:
            return 0.0
        try:
            runs = self.store.runs(model, node=self.node, limit=500)
        except Exception:
            return 0.0
        return next((r.finished_at.timestamp() for r in runs if r.verdict is Verdict.PASS), 0.0)


def _copy(state: ModelState) -> ModelState:
    """A copy a scrape can read without the lock (``dataclasses.replace`` was a tenth of a 200-model scrape)."""
    copied = copy.copy(state)
    copied.outputs = list(state.outputs)
    return copied
