"""A check's lint: the model's export hazards as warnings with the run, cached by model digest.

Why cached: linting reads every weight (the fp16 rule), and the daemon checks the same file every
few minutes; the hazards depend only on the file, the lint rules, what the runtime loads and the
benchmark set's shapes, so they are computed once per combination and kept as a small JSON under
``$XDG_STATE_HOME/onnxmon/lint/`` (``~/.local/state`` by default, like the result spool). A cache
that cannot be written (a read-only home) only costs the lint again next time.

The hazards never change the verdict: they go to ``details["lint"]``, and ``onnxmon check``
prints the errors and warnings under the model's row.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from monitor import bounded, jsonsafe, lint
from monitor.config.settings import ModelConfig
from monitor.files import benchsets
from monitor.files.tensors import sha256_bytes

LINT_FORMAT = 1  # bump when a rule changes: old cache entries are then never read
SHOWN = 20  # hazards kept in a check's details (the count says how many more)


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/onnxmon/lint``, by default ``~/.local/state/onnxmon/lint``."""
    env = os.environ if environ is None else environ
    return Path(env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")) / "onnxmon" / "lint"


def varied_dims(bench: benchsets.Benchset) -> dict[str, dict[int, set[int]]]:
    """Input -> axis -> the sizes the set's samples have on it (read from the manifest, no tensor loaded)."""
    found: dict[str, dict[int, set[int]]] = {}
    for sample in bench.samples:
        for entry in sample:
            for axis, size in enumerate(entry.shape):
                found.setdefault(entry.name, {}).setdefault(axis, set()).add(int(size))
    return found


def with_batch(
    varied: dict[str, dict[int, set[int]]], model: ModelConfig, bench: benchsets.Benchset | None
) -> dict[str, dict[int, set[int]]]:
    """``varied`` plus the batch ``checks.batch_invariance`` feeds on axis 0 of every input."""
    check = model.checks.batch_invariance
    if check is None or bench is None or not bench.samples:
        return varied
    merged = {name: {axis: set(sizes) for axis, sizes in axes.items()} for name, axes in varied.items()}
    for entry in bench.samples[0]:
        if entry.shape:
            merged.setdefault(entry.name, {}).setdefault(0, set()).update({int(entry.shape[0]), check.batch})
    return merged


def cached_lint(
    path: Path,
    model_sha256: str,
    *,
    support: lint.RuntimeSupport | None,
    varied: Callable[[], dict[str, dict[int, set[int]]]],
    inputs_key: str,
    directory: Path | None = None,
    cold: bool = True,
) -> tuple[lint.LintReport | None, bool]:
    """The lint report of ``path`` (whose digest is ``model_sha256``) and whether it came from the cache.

    ``inputs_key`` identifies what ``varied`` returns (the benchmark set's sha256 and the batch), so a
    cached report is found without reading the set's manifest; ``varied`` is called on a miss only.
    With ``cold=False`` a miss returns ``(None, False)`` instead of linting (no time left for it).
    """
    key = {
        "format": LINT_FORMAT,
        "model_sha256": model_sha256,
        "runtime": support.to_dict() if support else None,
        "inputs": inputs_key,
    }
    where = (directory or cache_dir()) / f"{sha256_bytes(json.dumps(key, sort_keys=True).encode())}.json"
    try:
        data = jsonsafe.loads(bounded.read_text(where, limit=16 << 20))  # our own cache file, a few KiB
        if isinstance(data, dict) and data.get("key") == key:
            return lint.LintReport.from_dict(data["report"]), True
    except (OSError, ValueError, KeyError, TypeError):
        pass  # absent, unreadable or from an older onnxmon: lint again
    if not cold:
        return None, False
    report = lint.lint_model(path, support=support, varied=varied())
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        temporary = where.with_suffix(f".tmp{os.getpid()}")
        temporary.write_text(jsonsafe.dumps({"key": key, "report": report.to_dict()}), encoding="utf-8")
        os.replace(temporary, where)
    except OSError:
        pass  # a read-only or full home: the next check lints again
    return report, False


def details(report: lint.LintReport, *, cached: bool) -> dict[str, Any]:
    """What a check result carries: counts, the first ``SHOWN`` hazards (errors first), the cache flag."""
    return {
        "counts": report.counts(),
        "hazards": [h.to_dict() for h in report.hazards[:SHOWN]],
        "more": max(0, len(report.hazards) - SHOWN),
        "cached": cached,
    }
