"""The real-model corpus through a kept check worker's state: the numbers of a new worker, swaps seen.

A check worker runs ``run_check`` with its ``runtime.worker_state.WorkerState``: the same session
for every check of the model while its file stays the same. Over every corpus model this checks that
a worker's first, second and 20th checks measure exactly what a new worker's first check measures
(verdict, reasons, every ``OutputStats`` of every output, as onnxmon's JSON so a NaN equals itself),
that the session is built once, and that a model file swapped mid-life is ``model_changed`` at the
very next check (its session built again), then passes again once the pristine file is back.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from monitor import jsonsafe
from monitor.check import run_check
from monitor.results import CheckResult, Verdict
from monitor.runtime.worker_state import WorkerState
from tests.realmodels import CORPUS, MODELS, Prepared, explain, prepare

pytestmark = pytest.mark.realmodels


@pytest.fixture(scope="module")
def prepared() -> Iterator[dict[str, Prepared]]:
    yield {}


def numbers(result: CheckResult) -> str:
    outputs = [o.to_dict() for o in result.outputs]
    return jsonsafe.dumps([str(result.verdict), sorted(r.code for r in result.reasons), outputs])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_kept_worker_measures_what_a_new_one_does_and_sees_a_swap(
    name: str, prepared: dict[str, Prepared], tmp_path_factory: pytest.TempPathFactory
) -> None:
    item = prepare(prepared, name, tmp_path_factory).captured()
    plan = item.plan()
    kept = WorkerState()
    checks = [run_check(plan, worker=kept) for _ in range(20)]
    first, second, last = checks[0], checks[1], checks[-1]
    fresh = run_check(plan)
    assert first.verdict is Verdict.PASS, explain(first)
    assert kept.session_builds == 1 and second.timings["load_s"] == 0.0
    assert numbers(first) == numbers(second) == numbers(last) == numbers(fresh)
    other = "sk-forest-regressor" if name != "sk-forest-regressor" else "sk-logreg-nozipmap"
    try:
        item.path.write_bytes((CORPUS / MODELS[other].relative).read_bytes())
        swapped = run_check(plan, worker=kept)
        swapped_fresh = run_check(plan)
    finally:
        item.restore()
    assert any(r.code == "model_changed" for r in swapped.reasons), explain(swapped)
    assert kept.session_builds == 2, "the swapped file's session was built"
    assert numbers(swapped) == numbers(swapped_fresh)
    back = run_check(plan, worker=kept)
    assert back.verdict is Verdict.PASS and numbers(back) == numbers(fresh), explain(back)
