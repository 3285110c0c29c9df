"""The labels of ``onnxmon_last_run_info``: why each model's last run ended as it did, in bounded values.

One series per model, always 1, whose labels say what a notification needs to say why: the run's
primary reason, its attribution, the likely cause its diagnosis names, how far over tolerance it
went (a bucket, never the number: a number as a label makes a new series every run) and the stable
environment fields that differ from the baseline's. The alert rules read it in their annotations
(``deploy/prometheus/alerts.yaml``), so a page carries its cause without the alert's identity
changing when the diagnosis lands or the deviation moves.

Every value comes from a closed set or a short list of snapshot field names: nothing here can
grow a series per run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from monitor.results import Verdict
from monitor.runtime import envsnap
from monitor.store import RunRecord

LABELS = ("model", "verdict", "reason", "attribution", "cause", "error_over_tolerance", "environment_changed")
NONE = "none"
UNDIAGNOSED = "undiagnosed"
"""The cause of a failing run no diagnosis has named yet (``daemon.diagnose_on_fail`` off, or still running)."""
MAX_FIELDS = 3
"""Changed environment fields named in the label; more are counted (``+2 more``)."""
# (upper bound, label): the run's error ÷ tolerance falls in the first bucket whose bound exceeds it
_BUCKETS = ((1.0, "<1"), (2.0, "1-2"), (10.0, "2-10"), (100.0, "10-100"), (1000.0, "100-1000"))
_TOP = ">=1000"
ERROR_BUCKETS = (NONE, *(label for _, label in _BUCKETS), _TOP)


def error_bucket(ratio: float | None) -> str:
    """The bucket of a run's error ÷ tolerance (1.0 is the line): ``<1`` ... ``>=1000``, ``none`` unmeasured."""
    if ratio is None or math.isnan(ratio):
        return NONE
    for bound, label in _BUCKETS:
        if ratio < bound:
            return label
    return _TOP


def environment_changed(changes: Iterable[Mapping[str, Any]]) -> str:
    """The stable fields a run's environment changed against its baseline's, versions first: ``a,b,c +2 more``.

    Field names come from the environment snapshot's own schema (``monitor/runtime/envsnap.py``), a
    short fixed list; values (versions) are left to ``onnxmon env diff``. ``none`` when none changed.
    """
    names = [str(c.get("field")) for c in envsnap.ordered(changes) if c.get("stable", True) and c.get("field")]
    names = list(dict.fromkeys(names))
    if not names:
        return NONE
    shown = ",".join(names[:MAX_FIELDS])
    return shown if len(names) <= MAX_FIELDS else f"{shown} +{len(names) - MAX_FIELDS} more"


def labels(model: str, last: RunRecord | None, cause: str) -> list[str]:
    """The label values, in ``LABELS`` order, of the model's last run (``cause``: ``collector.diagnosed_cause``).

    A fail no diagnosis has named says ``undiagnosed``, so a page reads "likely cause undiagnosed"
    (the runbook: `onnxmon diagnose MODEL`), never "likely cause none"."""
    if last is None:
        return [model, NONE, NONE, NONE, NONE, NONE, NONE]
    reasons = last.all_reasons()
    reason = reasons[0].code if reasons and last.verdict is not Verdict.PASS else NONE
    if last.verdict is not Verdict.PASS and not reasons:
        reason = "internal_error"
    raw = last.details.get("env_diff")
    changes = [c for c in raw if isinstance(c, Mapping)] if isinstance(raw, list) else []
    return [
        model,
        last.verdict.value,
        reason,
        last.attribution or NONE,
        UNDIAGNOSED if cause == NONE and last.verdict is Verdict.FAIL else cause,
        error_bucket(last.error_ratio) if last.verdict is not Verdict.ERROR else NONE,
        environment_changed(changes),
    ]
