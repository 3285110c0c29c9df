"""A reference model's noise floor is measured once and kept (monitor/localize/noisefloor.py).

Real ORT sessions on a 100+ node MLP: a second localization against the same reference file and
input runs the reference once per fetch instead of twice and gives the same answer as a fresh
one; a reference rewritten in place (same path) is measured afresh.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.localize import noisefloor
from monitor.localize.engine import LocalizationReport, localize
from monitor.localize.request import LocalizeRequest, Mode
from tests import modelzoo

CPU = [ProviderSpec(name="CPUExecutionProvider")]
PRODUCTION = SessionConfig()
PERTURBED = "w20"  # consumed by matmul_20


@pytest.fixture
def models(tmp_path: Path) -> Iterator[tuple[Path, Path, dict[str, np.ndarray]]]:
    mlp = modelzoo.deep_mlp()
    reference = modelzoo.save(mlp, tmp_path / "reference.onnx")
    subject = modelzoo.save(modelzoo.perturb_initializer(mlp, PERTURBED, 1.0, index=17), tmp_path / "subject.onnx")
    feeds = {"x": np.random.default_rng(0).normal(0, 1, (4, 16)).astype(np.float32)}
    noisefloor.forget()
    yield subject, reference, feeds
    noisefloor.forget()


def _answer(report: LocalizationReport) -> dict[str, Any]:
    """Everything the report says but how long it took and how many runs it needed."""
    return {k: v for k, v in report.to_dict().items() if k not in ("seconds", "runs")}


def _against(
    subject: Path, reference: Path, feeds: dict[str, np.ndarray], mode: Mode, **request: Any
) -> LocalizationReport:
    return localize(
        subject,
        feeds,
        LocalizeRequest(reference_model=reference, mode=mode, **request),
        providers=CPU,
        session=PRODUCTION,
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["all", "bisect"])
def test_a_kept_floor_gives_the_fresh_answer_with_fewer_reference_runs(
    models: tuple[Path, Path, dict[str, np.ndarray]], mode: str
) -> None:
    subject, reference, feeds = models
    fresh = _against(subject, reference, feeds, mode)
    kept = _against(subject, reference, feeds, mode)
    assert _answer(kept) == _answer(fresh)
    assert kept.runs < fresh.runs  # the reference ran once per fetch, not twice
    # Ground truth from plain ORT: the perturbed weight's consumer is the first output that differs.
    first = fresh.first_changed
    assert first is not None and "matmul_20" in {first.name, *first.fused_from}
    plain = [
        dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds), strict=True))
        for s in (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (subject, reference))
    ]
    assert not np.array_equal(plain[0]["y"], plain[1]["y"])


def test_a_reference_rewritten_in_place_is_measured_afresh(models: tuple[Path, Path, dict[str, np.ndarray]]) -> None:
    subject, reference, feeds = models
    fresh = _against(subject, reference, feeds, "all")
    assert _against(subject, reference, feeds, "all").runs < fresh.runs
    # The same bytes written again: a new stamp (mtime, ctime), so the floor is measured again.
    reference.write_bytes(reference.read_bytes())
    os.utime(reference, ns=(reference.stat().st_atime_ns, reference.stat().st_mtime_ns + 1_000_000))
    again = _against(subject, reference, feeds, "all")
    assert again.runs == fresh.runs and _answer(again) == _answer(fresh)
    # New content at the same path (the reference is now the subject): the kept floor is not used
    # and the answer is the new reference's, as a fresh process would give it.
    reference.write_bytes(subject.read_bytes())
    rewritten = _against(subject, reference, feeds, "all")
    noisefloor.forget()
    assert _answer(rewritten) == _answer(_against(subject, reference, feeds, "all"))
    assert rewritten.first_changed is None and rewritten.first_out_of_tolerance is None


def test_another_input_is_another_key(models: tuple[Path, Path, dict[str, np.ndarray]]) -> None:
    subject, reference, feeds = models
    fresh = _against(subject, reference, feeds, "all")
    other = {"x": feeds["x"] + np.float32(1.0)}
    assert _against(subject, reference, other, "all").runs == fresh.runs


def test_a_rewritten_external_data_file_is_measured_afresh(
    models: tuple[Path, Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    subject, reference, feeds = models
    split = tmp_path / "split" / "reference.onnx"
    split.parent.mkdir()
    onnx.save(
        onnx.load(str(reference)), str(split), save_as_external_data=True, location="weights.bin", size_threshold=0
    )
    fresh = _against(subject, split, feeds, "all")
    assert _against(subject, split, feeds, "all").runs < fresh.runs
    weights = split.parent / "weights.bin"
    weights.write_bytes(weights.read_bytes())  # the model file untouched; its weights rewritten in place
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1_000_000))
    again = _against(subject, split, feeds, "all")
    assert again.runs == fresh.runs and _answer(again) == _answer(fresh)


def test_a_fresh_floor_is_measured_only_for_chunks_that_differ_from_the_subject(
    models: tuple[Path, Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream of the perturbed weight both sides agree to the bit: no second reference run there.

    The same localization with the reference's floor measured at every fetch (the old rule) gives
    the same answer with more runs; the floors it measured where the subject differs are the same.
    """
    subject, reference, feeds = models
    lazy = _against(subject, reference, feeds, "all", chunk_size=16)  # chunks wholly upstream of the change
    lazy_floors = dict(next(iter(noisefloor._kept.values())))
    noisefloor.forget()
    original = noisefloor.KeptNoise.__init__

    def every_fetch(self: noisefloor.KeptNoise, source: Any, key: Any) -> None:
        original(self, source, key)
        self.every_fetch = True

    monkeypatch.setattr(noisefloor.KeptNoise, "__init__", every_fetch)
    every = _against(subject, reference, feeds, "all", chunk_size=16)
    every_floors = next(iter(noisefloor._kept.values()))
    assert _answer(lazy) == _answer(every)
    assert lazy.runs < every.runs, (lazy.runs, every.runs)
    assert lazy_floors and set(lazy_floors) < set(every_floors), "floors only where the subject differs"
    assert all(every_floors[name] == value for name, value in lazy_floors.items())
