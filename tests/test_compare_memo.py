"""A warm check's comparison answered from the last one gives a fresh ``Comparison``'s stats, to the bit.

``compare.memo.Remembered`` answers a check from the last one only while every sample's outputs are
bitwise the last check's and its baseline arrays the very same objects; anything else (one element
moved, another dtype or shape, a baseline read again, another sample count, over the byte budget,
object arrays) is compared in full, with the samples before the difference fed from the record.
Ground truth: a plain ``Comparison`` fed the same samples from the start.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor import jsonsafe
from monitor.compare import memo
from monitor.compare.accumulate import Comparison
from monitor.config.decisions import Decision
from monitor.results import AppliedTolerance, OutputStats

TOL = AppliedTolerance(atol=1e-3, rtol=1e-2, cosine_min=0.99, max_mismatch_ratio=0.1, topk_k=2)
NAMES = ["probs", "label"]
Sample = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]  # (produced, baseline)


def build(samples: int, baseline: Sequence[dict[str, np.ndarray]]) -> tuple[Comparison, tuple[object, ...]]:
    elements = {name: sum(int(b[name].size) for b in baseline) for name in NAMES}
    tolerances = dict.fromkeys(NAMES, TOL)
    decisions = {"probs": Decision(kind="argmax")}
    args = (NAMES, NAMES, tolerances, samples, elements, decisions)
    comparison = Comparison(NAMES, NAMES, tolerances, samples=samples, elements=elements, decisions=decisions)
    return comparison, memo.key_of(*args)


def remembered(check: Sequence[Sample], kept: memo.Memo, actual_samples: int | None = None) -> tuple[OutputStats, ...]:
    comparison, key = build(len(check), [b for _, b in check])
    compared = memo.Remembered(comparison, key, kept)
    for produced, baseline in check:
        compared.feed(produced, baseline)
    return compared.finish(actual_samples)


def plain(check: Sequence[Sample], actual_samples: int | None = None) -> tuple[OutputStats, ...]:
    comparison, _ = build(len(check), [b for _, b in check])
    for produced, baseline in check:
        comparison.feed(produced, baseline)
    return comparison.finish(actual_samples)


def bits(stats: tuple[OutputStats, ...]) -> str:
    return jsonsafe.dumps([s.to_dict() for s in stats])  # NaN as "NaN": compared by value, not identity


def baseline_set(rng: np.random.Generator, count: int) -> list[dict[str, np.ndarray]]:
    return [
        {"probs": rng.random((3, 4)).astype(np.float32), "label": rng.integers(0, 4, (3,)).astype(np.int64)}
        for _ in range(count)
    ]


def produce(
    baseline: Sequence[dict[str, np.ndarray]], noise: float, rng: np.random.Generator
) -> list[dict[str, np.ndarray]]:
    """Outputs near the baseline (fresh arrays every time, as a session's run gives)."""
    return [
        {
            "probs": (b["probs"] + rng.standard_normal((3, 4)).astype(np.float32) * np.float32(noise)),
            "label": b["label"].copy(),
        }
        for b in baseline
    ]


def recorded(
    seed: int, count: int, budget_bytes: int = memo.DEFAULT_BUDGET_BYTES
) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]], memo.Memo]:
    """A baseline of ``count`` samples, outputs near it, and a memo after one check of them."""
    rng = np.random.default_rng(seed)
    baseline = baseline_set(rng, count)
    first = produce(baseline, 1e-3, rng)
    kept = memo.Memo(budget_bytes=budget_bytes)
    remembered(list(zip(first, baseline, strict=True)), kept)
    return baseline, first, kept


def test_a_check_whose_outputs_are_bitwise_the_last_ones_is_answered_from_the_record() -> None:
    baseline, first, _ = recorded(0, 5)
    kept = memo.Memo()
    answers = []
    for _ in range(3):
        again = [{k: v.copy() for k, v in sample.items()} for sample in first]  # new arrays, the same bits
        answers.append(remembered(list(zip(again, baseline, strict=True)), kept))
    assert [kept.answered, kept.reused] == [2, True]
    assert answers[1] is answers[0] and answers[2] is answers[0]
    assert bits(answers[0]) == bits(plain(list(zip(first, baseline, strict=True))))


@pytest.mark.parametrize("where", [0, 2, 4])
def test_one_ulp_moved_in_one_sample_is_compared_in_full_with_the_samples_before_it_from_the_record(where: int) -> None:
    baseline, first, kept = recorded(1, 5)
    moved = [{k: v.copy() for k, v in sample.items()} for sample in first]
    moved[where]["probs"][1, 2] = np.nextafter(moved[where]["probs"][1, 2], np.float32(2))
    check = list(zip(moved, baseline, strict=True))
    got = remembered(check, kept)
    assert kept.reused is False and kept.answered == 0
    assert bits(got) == bits(plain(check))
    again = [{k: v.copy() for k, v in sample.items()} for sample in moved]
    assert bits(remembered(list(zip(again, baseline, strict=True)), kept)) == bits(plain(check))
    assert kept.reused is True, "the moved outputs are the record now"


def test_a_baseline_read_again_is_not_matched_even_with_the_same_bits() -> None:
    baseline, first, kept = recorded(2, 3)
    reread = [{k: v.copy() for k, v in sample.items()} for sample in baseline]  # equal values, other objects
    remembered(list(zip(first, reread, strict=True)), kept)
    assert kept.reused is False


def test_another_sample_count_or_actual_count_is_compared_in_full() -> None:
    baseline, first, kept = recorded(3, 4)
    full = list(zip(first, baseline, strict=True))
    assert bits(remembered(full, kept, actual_samples=5)) == bits(plain(full, actual_samples=5))
    assert kept.reused is False
    remembered(full, kept)
    fewer = full[:3]
    kept_before = kept.record
    assert kept_before is not None
    assert bits(remembered(fewer, kept)) == bits(plain(fewer)) and kept.reused is False


def test_outputs_over_the_byte_budget_are_not_held_and_the_next_check_compares_in_full() -> None:
    baseline, first, kept = recorded(4, 3, budget_bytes=100)  # one sample's outputs: 3*4*4 + 3*8 = 72 bytes
    check = list(zip(first, baseline, strict=True))
    assert kept.record is None
    assert bits(remembered(check, kept)) == bits(plain(check)) and kept.answered == 0


def test_object_arrays_are_never_matched_by_their_bytes() -> None:
    baseline = [{"probs": np.array(["a", "b"], dtype=object), "label": np.array([1, 2])} for _ in range(2)]
    produced = [{"probs": np.array(["a", "b"], dtype=object), "label": np.array([1, 2])} for _ in range(2)]
    kept = memo.Memo()
    comparison = Comparison(
        NAMES, NAMES, dict.fromkeys(NAMES, AppliedTolerance(0.0, 0.0)), samples=2, elements={"probs": 4, "label": 4}
    )
    compared = memo.Remembered(comparison, ("key",), kept)
    for p, b in zip(produced, baseline, strict=True):
        compared.feed(p, b)
    compared.finish()
    assert kept.record is None, "pointers are not values: nothing held"


def test_held_outputs_are_read_only() -> None:
    _, _, kept = recorded(5, 2)
    assert kept.record is not None
    with pytest.raises(ValueError, match="read-only"):
        kept.record.produced[0][0][0, 0] = 7.0


@settings(max_examples=max(60, settings.default.max_examples // 4), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    steps=st.lists(
        st.tuples(st.sampled_from(["same", "one_element", "dtype", "shape", "baseline", "label"]), st.integers(0, 3)),
        min_size=1,
        max_size=6,
    ),
)
def test_any_sequence_of_checks_gives_a_plain_comparisons_stats(seed: int, steps: list[tuple[str, int]]) -> None:
    """Check after check, each a change of the last (or none), remembered == plain, to the bit."""
    rng = np.random.default_rng(seed)
    baseline = baseline_set(rng, 4)
    produced = produce(baseline, 1e-2, rng)
    kept = memo.Memo()
    last: list[Sample] | None = None
    for change, where in steps:
        produced = [{k: v.copy() for k, v in sample.items()} for sample in produced]
        if change == "one_element":
            produced[where]["probs"][0, 0] += np.float32(0.5)
        elif change == "dtype":
            produced[where]["probs"] = produced[where]["probs"].astype(np.float64)
        elif change == "shape":
            produced[where]["probs"] = produced[where]["probs"][:2]
        elif change == "baseline":
            baseline = [dict(sample) for sample in baseline]
            baseline[where] = {k: v.copy() for k, v in baseline[where].items()}
        elif change == "label":
            produced[where]["label"] = (produced[where]["label"] + 1) % 4
        check = list(zip(produced, baseline, strict=True))
        assert bits(remembered(check, kept)) == bits(plain(check)), (change, where)
        assert kept.reused is (last is not None and unchanged(last, check)), (change, where)
        last = check


def unchanged(before: Sequence[Sample], now: Sequence[Sample]) -> bool:
    """Every output the same dtype, shape and bytes, every baseline array the same object (numpy's word)."""
    return len(before) == len(now) and all(
        a[name].dtype == b[name].dtype
        and a[name].shape == b[name].shape
        and np.array_equal(a[name].view(np.uint8), b[name].view(np.uint8))
        and x[name] is y[name]
        for (a, x), (b, y) in zip(before, now, strict=True)
        for name in NAMES
    )


def test_a_record_never_pins_the_baseline_arrays_its_owner_let_go() -> None:
    """A full re-read or a promotion drops the kept arrays: the memo must not hold them in memory."""
    baseline, first, kept = recorded(6, 3)
    watched = weakref.ref(baseline[0]["probs"])
    del baseline
    gc.collect()
    assert watched() is None, "the record held a baseline array its owner dropped"
    assert kept.record is not None
    reread = baseline_set(np.random.default_rng(6), 3)
    remembered(list(zip(first, reread, strict=True)), kept)
    assert kept.reused is False
