"""The export checks added to a check's result: lint hazards (warnings) and batch invariance.

``with_export_checks(plan, result)`` is called by ``check.run_check`` after the comparison with
the baseline, whatever its verdict: a model ONNX Runtime refused to load is exactly where lint
says why (an opset the runtime does not know). It never raises; every failure is a reason or a
note in ``details``:

- ``details["lint"]``: the hazards of the model file (``lint_warnings``), cached by digest; off
  with ``models[].checks.lint: false``. They never change the verdict; a lint error turns the
  attribution of a failure against a ``reference`` baseline into ``export``.
- ``details["batch_invariance"]`` and, when the batched run differs, ``batch_variant`` reasons
  (verdict ``fail``); a model that cannot take a batch is a ``config_error`` (verdict ``error``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from monitor import lint
from monitor.config.plan import CheckPlan
from monitor.details import Details
from monitor.errors import MonitorError
from monitor.exportcheck import lint_warnings
from monitor.exportcheck.batch import check_batch_invariance
from monitor.files import benchsets, modelfile
from monitor.results import CheckResult, Verdict


def with_export_checks(plan: CheckPlan, result: CheckResult, *, clock: Any = time.time) -> CheckResult:
    """``result`` with the model's lint hazards and, when configured, its batch invariance."""
    checks = plan.model.checks
    if not checks.lint and checks.batch_invariance is None:
        return result
    details: Details = {**result.details}
    opened: list[benchsets.Benchset | None] = []

    def bench() -> benchsets.Benchset | None:  # read the manifest at most once, and only when needed
        if not opened:
            opened.append(benchsets.replayed(plan.benchsets_dir, plan.benchset.name, result))
        return opened[0]

    hazards: tuple[lint.Hazard, ...] = ()
    if checks.lint:
        # a cold lint reads every weight: only with a quarter of the timeout left, so it never turns
        # a measured result into a timeout (the cache is read whatever the time)
        cold = plan.timeout_s - (clock() - result.started_at) > plan.timeout_s / 4
        try:
            report, cached = _lint(plan, result, bench, cold=cold)
            if report is None:
                details["lint"] = {"note": f"not linted: too little of the timeout left; run onnxmon lint {plan.name}"}
            else:
                hazards = report.hazards
                details["lint"] = lint_warnings.details(report, cached=cached)
        except MonitorError as exc:
            details["lint"] = {"note": f"not linted: {exc}"}
        except Exception as exc:  # a bug in a rule's plumbing must not cost the check its result
            details["lint"] = {"note": f"not linted: {type(exc).__name__}: {exc}"}
    reasons = list(result.reasons)
    verdict = result.verdict
    left = plan.timeout_s - (clock() - result.started_at)
    if checks.batch_invariance is not None:
        replayed = bench() if left > 0 else None
        if left <= 0:
            details["batch_invariance"] = {"note": "not run: the check used its whole timeout"}
        elif replayed is None:
            details["batch_invariance"] = {"note": f"benchset {plan.benchset.name!r} is not materialized yet"}
        else:
            found = check_batch_invariance(
                plan, replayed, batch=checks.batch_invariance.batch, timeout_s=left, hazards=hazards
            )
            details["batch_invariance"] = found.details
            reasons += found.reasons
            codes = {r.code for r in found.reasons}
            if codes & {"config_error", "timeout"}:
                verdict = Verdict.worst([verdict, Verdict.ERROR])
            elif codes:
                verdict = Verdict.worst([verdict, Verdict.FAIL])
    attribution = result.attribution
    if verdict is Verdict.FAIL and attribution is None:
        attribution = "numeric"
    if verdict is Verdict.FAIL and attribution in ("numeric", "env_changed") and _export_explains(result, hazards):
        attribution = "export"
    elif verdict is not Verdict.FAIL:
        attribution = None
    return dataclasses.replace(
        result,
        verdict=verdict,
        reasons=tuple(reasons),
        details=details,
        attribution=attribution,
        finished_at=max(result.finished_at, clock()),
    )


def _export_explains(result: CheckResult, hazards: tuple[lint.Hazard, ...]) -> bool:
    """A lint error explains a failure against a reference: the framework's numbers, not ORT's on this file.

    Against an ONNX Runtime baseline of the same file both sides ran the same (faulty) graph.
    """
    errors = [h for h in hazards if h.severity == "error"]
    return bool(errors) and result.details.get("baseline_source") == "reference"


def _lint(
    plan: CheckPlan, result: CheckResult, bench: Callable[[], benchsets.Benchset | None], *, cold: bool
) -> tuple[lint.LintReport | None, bool]:
    from monitor.runtime import support  # the probe loads ORT sessions: only when a check lints

    identity = result.details.get("model") if isinstance(result.details.get("model"), dict) else None
    if result.model_sha256 and identity is not None:
        digest = f"{result.model_sha256}:{sorted(dict(identity.get('external_data') or {}).items())}"
    else:
        found = modelfile.identify(plan.model.path)
        digest = f"{found.sha256}:{sorted(found.external_data.items())}"
    batch = plan.model.checks.batch_invariance
    if result.benchset_sha256:
        inputs_key = f"{result.benchset}@{result.benchset_sha256}:batch={batch.batch if batch else None}"
    else:  # the check stopped before its set was opened: name the set by its manifest
        found_bench = bench()
        inputs_key = f"{found_bench.name}@{found_bench.sha256}" if found_bench else "no benchset"
        inputs_key += f":batch={batch.batch if batch else None}"

    def varied() -> dict[str, dict[int, set[int]]]:
        opened = bench()
        dims = lint_warnings.varied_dims(opened) if opened is not None else {}
        return lint_warnings.with_batch(dims, plan.model, opened)

    return lint_warnings.cached_lint(
        plan.model.path, digest, support=support.probe(), varied=varied, inputs_key=inputs_key, cold=cold
    )
