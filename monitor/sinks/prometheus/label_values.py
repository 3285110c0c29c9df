"""The bounded label values of a run and a baseline that ``/metrics`` exports, and the run-level
fallback figure: the reason a run did not pass, whether its providers fell back, a baseline's source.

Nothing here imports ``prometheus_client``: these functions turn results into numbers and label
values, so they can be tested without a registry. ``docs/metrics.md`` is the contract they
implement. Figures of one output (``error_ratio``, ``is_measured``, ...) are not here: they belong
to ``monitor.results.OutputStats``, which the log sink, the API and the pages read too. What a model
file says (``onnxmon_model_info``) is ``model_facts.py``; the runtime's labels
(``onnxmon_runtime_info``) are ``runtime_info.py``.
"""

from __future__ import annotations

from collections.abc import Iterable

from monitor.results import CheckResult, Reason

# BaselineMeta.source -> the documented ``source`` label of onnxmon_baseline_info.
_SOURCE_LABELS = {"captured": "capture", "reference": "capture", "imported": "import", "auto": "auto"}


def primary_reason(result: CheckResult) -> str:
    """The first reason code of a non-passing result (check-level first), ``internal_error`` if none."""
    reasons = result.all_reasons()
    return reasons[0].code if reasons else "internal_error"


def provider_fallback(requested: Iterable[str], effective: Iterable[str], reasons: Iterable[Reason]) -> float | None:
    """1.0/0.0 for a run that created a session; ``None`` when it made none (nothing to say)."""
    effective = tuple(effective)
    if not effective:
        return None
    missing = set(requested) - set(effective)
    return 1.0 if missing or any(r.code == "provider_fallback" for r in reasons) else 0.0


def baseline_source_label(source: str | None) -> str:
    """The documented ``source`` label (``capture``, ``auto``, ``import``) for a baseline's source."""
    if source is None:
        return "none"
    return _SOURCE_LABELS.get(source, source if source in {"capture", "import"} else "capture")
