"""The real-model corpus through a warm worker's kept session: the numbers of a fresh check, swaps seen.

A warm worker (``daemon.worker: warm``) runs ``run_check`` with ``runtime.kept.KeptModels``: the
same session for every check of the model while its file stays the same. Over every corpus model
this checks that the kept session measures exactly what a fresh check measures (verdict, reasons,
every metric of every output, as onnxmon's JSON so a NaN equals itself), that it is reused, and that
a model file swapped mid-life is ``model_changed`` at the very next check, then passes again once
the pristine file is back.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from monitor import jsonsafe
from monitor.check import run_check
from monitor.results import CheckResult, Verdict
from monitor.runtime.kept import KeptModels
from tests.realmodels import CORPUS, MODELS, Prepared, explain, prepare

pytestmark = pytest.mark.realmodels


@pytest.fixture(scope="module")
def prepared() -> Iterator[dict[str, Prepared]]:
    yield {}


def numbers(result: CheckResult) -> str:
    outputs = [(o.name, str(o.verdict), o.metrics.to_dict()) for o in result.outputs]
    return jsonsafe.dumps([str(result.verdict), sorted(r.code for r in result.reasons), outputs])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_kept_session_measures_what_a_fresh_one_does_and_sees_a_swap(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory).captured()
    plan = item.plan()
    kept = KeptModels()
    first, second = run_check(plan, models=kept), run_check(plan, models=kept)
    fresh = run_check(plan)
    assert first.verdict is Verdict.PASS, explain(first)
    assert second.details["warm"]["session_reused"] is True and second.timings["load_s"] == 0.0
    assert numbers(first) == numbers(second) == numbers(fresh)
    other = "sk-forest-regressor" if name != "sk-forest-regressor" else "sk-logreg-nozipmap"
    try:
        item.path.write_bytes((CORPUS / MODELS[other].relative).read_bytes())
        swapped = run_check(plan, models=kept)
        swapped_fresh = run_check(plan)
    finally:
        item.restore()
    assert any(r.code == "model_changed" for r in swapped.reasons), explain(swapped)
    assert (kept.note() or {})["model_hashed"] is True, "the swapped file was hashed again"
    assert numbers(swapped) == numbers(swapped_fresh)
    back = run_check(plan, models=kept)
    assert back.verdict is Verdict.PASS and numbers(back) == numbers(fresh), explain(back)
