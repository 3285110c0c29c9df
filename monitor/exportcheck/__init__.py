"""Checks of how a model was exported, run beside the comparison with its baseline.

``with_export_checks`` adds the model's lint hazards (``monitor.lint``, cached by digest) and the
batch-invariance check (``models[].checks.batch_invariance``) to a check's result. It runs the
model (batch invariance) and compares outputs, so it sits at the level of ``monitor.localize``:
``check.py`` calls it, nothing below imports it.
"""

from __future__ import annotations

from monitor.exportcheck.attach import with_export_checks
from monitor.exportcheck.batch import BatchInvariance, check_batch_invariance
from monitor.exportcheck.lint_warnings import cached_lint, varied_dims, with_batch

__all__ = [
    "BatchInvariance",
    "cached_lint",
    "check_batch_invariance",
    "varied_dims",
    "with_batch",
    "with_export_checks",
]
