"""The drift study's pure parts (scripts/drift_measure.py) and its committed document (docs/drift-study.md).

The study itself (``scripts/drift-study``) needs one venv per ONNX Runtime release and minutes of CPU, so
it is not run here: these tests hold its comparison rules to a table and check that the document it
wrote is well-formed, names at least four releases and both optimization levels, and covers every
corpus model.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.realmodels import corpus_models

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "drift-study.md"


def _load_measure() -> ModuleType:
    spec = importlib.util.spec_from_file_location("drift_measure", ROOT / "scripts" / "drift_measure.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("drift_measure", module)
    spec.loader.exec_module(module)
    return module


dm = _load_measure()
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("a", "b", "exact"),
    [
        (np.array([1.0, 2.0], np.float32), np.array([1.0, 2.0], np.float32), True),
        (np.array([1.0, NAN], np.float32), np.array([1.0, NAN], np.float32), True),
        (np.array([NAN, 1.0], np.float32), np.array([1.0, NAN], np.float32), False),
        (np.array([0.0], np.float32), np.array([-0.0], np.float32), False),  # equal, but not the same bits
        (np.array([1.0], np.float32), np.array([np.nextafter(np.float32(1), np.float32(2))], np.float32), False),
        (np.array([1.0], np.float32), np.array([1.0], np.float64), False),  # dtype differs
        (np.array([1.0, 2.0], np.float32), np.array([[1.0, 2.0]], np.float32), False),  # shape differs
        (np.array([3, 4], np.int64), np.array([3, 4], np.int64), True),
        (np.array(["cat", "dog"]), np.array(["cat", "dog"]), True),
        (np.array(["cat", "dog"]), np.array(["cat", "emu"]), False),
        (np.array([1.5], np.float16), np.array([1.5], np.float16), True),
    ],
)
def test_bit_exact_means_the_same_bits_with_nan_at_the_same_places(a: np.ndarray, b: np.ndarray, exact: bool) -> None:
    assert dm.bit_exact(a, b) is exact


@pytest.mark.parametrize(
    ("a", "b", "floor", "expected"),
    [
        ([1.1], [1.0], 1e-6, [0.1]),
        ([1e-9], [0.0], 1e-6, [1e-3]),  # the floor keeps a near-zero reference from blowing up the ratio
        ([-2.0], [2.0], 1e-6, [2.0]),
        ([NAN], [NAN], 1e-6, [0.0]),
        ([INF], [INF], 1e-6, [0.0]),
        ([-INF], [INF], 1e-6, [INF]),
        ([NAN], [1.0], 1e-6, [INF]),
        ([1.0], [NAN], 1e-6, [INF]),
    ],
)
def test_relative_error_has_a_floor_and_treats_non_finite_values_by_place(
    a: list[float], b: list[float], floor: float, expected: list[float]
) -> None:
    got = dm.relative_errors(np.array(a, np.float32), np.array(b, np.float32), floor)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_the_floor_is_a_millionth_of_the_references_rms_over_all_samples() -> None:
    reference = [np.array([3.0, -3.0], np.float32), np.array([[3.0, NAN]], np.float32)]
    assert dm.relative_floor(reference) == pytest.approx(3e-6)
    assert dm.relative_floor([np.zeros(3, np.float32)]) == dm.FLOOR_MIN


@pytest.mark.parametrize(
    ("example", "kind"),
    [
        (np.zeros((2, 10), np.float32), "argmax"),
        (np.zeros((1, 4, 3), np.float16), "argmax"),
        (np.zeros((2, 1), np.float32), "n/a"),  # a regression value decides nothing
        (np.zeros(5, np.float32), "n/a"),
        (np.zeros(5, np.int64), "equal"),
        (np.zeros(5, bool), "equal"),
        (np.array(["cat"]), "equal"),
    ],
)
def test_what_an_output_decides_follows_its_dtype_and_shape(example: np.ndarray, kind: str) -> None:
    assert dm.decision_kind(example) == kind


@pytest.mark.parametrize(
    ("exact", "ratio", "expected"),
    [
        (True, None, "exact"),
        (True, 0.0, "exact"),
        (False, 0.0, "99.9 % band"),
        (False, 0.001, "99.9 % band"),
        (False, 0.0011, "99 % band"),
        (False, 0.01, "99 % band"),
        (False, 0.0101, "outside"),
        (False, None, "numeric only"),
    ],
)
def test_the_band_is_mlperf_test01s_two_tiers_with_the_flip_ratio_for_the_metric(
    exact: bool, ratio: float | None, expected: str
) -> None:
    assert dm.band(exact, ratio) == expected


def test_a_flipped_argmax_row_is_counted_once_per_row_over_all_samples() -> None:
    reference = [np.array([[0.1, 0.9], [0.8, 0.2]], np.float32), np.array([[0.6, 0.4], [0.3, 0.7]], np.float32)]
    candidate = [reference[0].copy(), np.array([[0.4, 0.6], [0.3, 0.7]], np.float32)]
    drift = dm.compare_output("logits", candidate, reference)
    assert (drift.decision, drift.decisions_flipped, drift.decisions_total) == ("argmax", 1, 4)
    assert not drift.bit_exact and drift.band == "outside"
    assert drift.max_rel == pytest.approx(0.5)


def test_a_model_is_exact_only_when_every_output_is_and_its_band_comes_from_its_decisions() -> None:
    labels = [np.array([1, 2, 3], np.int64)]
    moved = [np.array([1.0, 2.0], np.float32)], [np.array([1.0, 2.5], np.float32)]
    model = dm.compare_runs("m", {"label": labels, "score": moved[1]}, {"label": labels, "score": moved[0]})
    assert not model.bit_exact and not model.flipped_any
    assert model.band == "99.9 % band"  # the label decides, and none flipped
    numeric = dm.compare_runs("m", {"score": moved[1]}, {"score": moved[0]})
    assert numeric.band == "numeric only" and numeric.max_rel == pytest.approx(0.25)
    assert dm.compare_runs("m", {"label": labels}, {"label": labels}).band == "exact"


def test_a_zipmap_output_becomes_keys_and_values_and_strings_become_fixed_width() -> None:
    arrays, note = dm.flatten_output("prob", [{"cat": 0.25, "dog": 0.75}, {"cat": 0.5, "dog": 0.5}])
    assert note == ""
    assert arrays["prob:keys"].dtype.kind == "U" and arrays["prob:keys"].tolist() == [["cat", "dog"]] * 2
    assert arrays["prob:values"].dtype == np.float32 and dm.decision_kind(arrays["prob:values"]) == "argmax"
    labels, _ = dm.flatten_output("label", np.array(["cat", "émeu/ä b"], dtype=object))
    assert labels["label"].dtype.kind == "U"
    skipped, note = dm.flatten_output("seq", [np.zeros(2)])
    assert skipped == {} and "skipped" in note


# --- the committed document -----------------------------------------------------------------------


def test_the_drift_study_document_names_its_releases_levels_and_models() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert "Generated by scripts/drift-study" in text
    releases = re.search(r"^\| ONNX Runtime releases \| ([^|(]+)", text, re.MULTILINE)
    assert releases, "the header names the releases"
    versions = [v.strip() for v in releases.group(1).split(",")]
    assert len(versions) >= 4 and all(re.fullmatch(r"\d+\.\d+\.\d+", v) for v in versions), versions
    for heading in ("## Summary across models", "## Per model", "## Notes", "## Prior work"):
        assert heading in text
    for level in ("disable", "all"):
        assert f"### Level `{level}`" in text
    for field in ("| date |", "| machine |", "| Python |", "| numpy |", "| command |"):
        assert field in text
    assert "OODTE" in text and "stands in for the task metric" in text
    for model in corpus_models():
        assert f"| {model.name} |" in text, f"{model.name} missing from the per-model table"
    for version in versions[:-1]:
        assert f"| {version} → {versions[-1]} (upgrade) | all |" in text


def test_every_table_row_of_the_document_has_as_many_cells_as_its_header() -> None:
    width = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            width = None
            continue
        cells = line.count("|")
        if width is None:
            width = cells
        assert cells == width, line
