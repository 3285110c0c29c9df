"""The log sink: one structured JSON line per check result, for log search and alert context.

The line carries what a person needs to triage (model, verdict, reason codes, the worst output,
duration, baseline, environment) and nothing secret: no paths, no config values, no reason
details (they can quote file contents). Non-finite numbers are written as the strings
``"Infinity"``, ``"-Infinity"`` and ``"NaN"`` so that every line is valid JSON (the rule of
``monitor.jsonsafe``, docs/json.md).
"""

from __future__ import annotations

import logging
from typing import Any

from monitor import jsonsafe
from monitor.results import CheckResult, worst_output


class LogSink:
    """Writes ``{"event": "check", "model": ..., "verdict": ...}`` lines to ``logger`` (INFO for pass, else WARNING)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("onnxmon.checks")

    def write(self, result: CheckResult) -> None:
        """Log one line for ``result``."""
        fields = record(result)
        level = logging.INFO if result and "warnings" not in fields else logging.WARNING
        # The text line keeps the JSON in the message; `--log-format json` lifts the fields to the top level.
        self.logger.log(level, "%s", jsonsafe.dumps(fields, sort_keys=False), extra={"onnxmon_fields": fields})


def record(result: CheckResult) -> dict[str, Any]:
    """The fields of the log line (a dict, so tests and other formatters can reuse it)."""
    worst = worst_output(result.outputs)
    fingerprint = result.environment_fingerprint
    line: dict[str, Any] = {
        "event": "check",
        "model": result.model,
        "verdict": result.verdict.value,
        "reasons": sorted({r.code for r in result.all_reasons()}),
        "attribution": result.attribution,
        "duration_s": jsonsafe.number(round(result.duration_s, 6)),
        "baseline_id": result.baseline_id,
        "environment": fingerprint[:16] if fingerprint else None,
        "worst_output": None,
    }
    warnings = sorted({w.code for o in result.outputs for w in o.warnings})
    if warnings:  # tolerance.numeric: warn: numeric drift that flipped no decision, logged at warning level
        line["warnings"] = warnings
    if worst is not None:
        line["worst_output"] = {
            "name": worst.name,
            "verdict": worst.verdict.value,
            "max_abs_error": jsonsafe.number(worst.metrics.max_abs_error),
            "max_rel_error": jsonsafe.number(worst.metrics.max_rel_error),
            "atol": jsonsafe.number(worst.tolerance.atol),
            "rtol": jsonsafe.number(worst.tolerance.rtol),
            "error_ratio": jsonsafe.number(worst.error_ratio),
        }
    return line
