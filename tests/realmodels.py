"""The real-model corpus for tests: where each model is, a workspace per model, ground truth.

``tests/test_realmodels.py`` runs onnxmon over every model of ``tests/corpus/manifest.yaml``
(fetched by ``scripts/fetch-models`` into ``$ONNXMON_CORPUS_DIR``, else
``~/.cache/onnxmon-corpus``; the skl2onnx models are committed). This module holds what those
tests share: the manifest as data, one workspace per model (a private copy of the model, its
benchset and baseline), and the **ground truth**, computed with plain ONNX Runtime and numpy,
never with onnxmon's own comparison.

Ground truth classifies each output of a variant (a changed model file or changed session
settings) against the pristine model on the baseline's settings, over every benchmark sample:
``identical`` (bitwise, NaN at the same places), ``within`` (every element inside the default
rule ``|a-b| <= 1e-5 + 1e-4*|b|``, exact for integers and labels) or ``drift``; and whether a
float output changed its dtype (fp32 -> fp16), which is a drift of the model's contract by itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import yaml

from monitor import capture
from monitor.config.plan import plan_for
from monitor.files import benchsets
from monitor.results import CheckResult
from tests.conftest import unavailable
from tests.workspace import Workspace

CORPUS = Path(__file__).resolve().parent / "corpus"
MANIFEST = CORPUS / "manifest.yaml"
SCENARIOS = CORPUS / "scenarios.yaml"
ATOL, RTOL = 1e-5, 1e-4  # onnxmon's default tolerance, restated for the ground truth
ORDER = ("identical", "within", "drift")
# Reasons that say the numbers moved (as opposed to "the file changed" or "could not measure").
NUMERIC_REASONS = {"atol_rtol", "exact_mismatch", "cosine", "snr", "topk", "nan_mismatch", "inf_mismatch"}


@dataclass(frozen=True)
class CorpusModel:
    """One manifest entry: where its file is, what it is, how to draw its inputs."""

    name: str
    kind: tuple[str, ...]
    generate: dict[str, Any]
    relative: str  # under the cache (fetched, derived) or under tests/corpus (committed)
    committed: bool
    external_data: str | None = None


def corpus_models() -> list[CorpusModel]:
    data = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    found = [
        CorpusModel(m["name"], tuple(m["kind"]), m["generate"], f"models/{m['name']}/{Path(m['path']).name}", False)
        for m in data["models"]
    ]
    found += [
        CorpusModel(
            d["name"], tuple(d["kind"]), d["generate"], f"models/{d['name']}/model.onnx", False, d["external_data"]
        )
        for d in data.get("derived", [])
    ]
    found += [CorpusModel(c["name"], tuple(c["kind"]), c["generate"], c["file"], True) for c in data["committed"]]
    return found


MODELS = {m.name: m for m in corpus_models()}


def not_applicable(scenario: str) -> dict[str, str]:
    """Model -> why ``scenario``'s converter cannot make a runnable variant (tests/corpus/scenarios.yaml)."""
    data = yaml.safe_load(SCENARIOS.read_text(encoding="utf-8"))
    return {model: why for model, why in (data["not_applicable"].get(scenario) or {}).items()}


def fetched_digest() -> str:
    """sha256 of the manifest's fetched part, as ``scripts/fetch-models`` writes it to READY.

    Committed models are not part of it: adding one must not send everyone back to the fetch.
    """
    manifest = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    fetched = {key: manifest.get(key) for key in ("format", "wheels", "models", "derived")}
    return hashlib.sha256(json.dumps(fetched, sort_keys=True).encode()).hexdigest()


def cache_dir() -> Path:
    return Path(os.environ.get("ONNXMON_CORPUS_DIR") or Path.home() / ".cache" / "onnxmon-corpus")


def source_file(model: CorpusModel) -> Path:
    """The pristine model file, or skip (fail where mandatory) when the corpus was not fetched."""
    if model.committed:
        return CORPUS / model.relative
    ready = cache_dir() / "READY"
    want = fetched_digest()
    if not ready.is_file() or ready.read_text(encoding="utf-8").strip() != want:
        unavailable("realmodels", f"corpus not fetched for this manifest in {cache_dir()}: run scripts/fetch-models")
    return cache_dir() / model.relative


@dataclass
class Prepared:
    """A workspace holding one corpus model (a private copy), its benchset and, once made, a baseline."""

    model: CorpusModel
    ws: Workspace
    path: Path  # the workspace's copy of the model file
    pristine: Path
    baseline: bool = False
    feeds: list[dict[str, np.ndarray]] = field(default_factory=list)

    def plan(self) -> Any:
        return plan_for(self.ws.settings(), self.model.name)

    def restore(self) -> None:
        """The pristine model file (and its external data) back in place, the default session settings."""
        shutil.copyfile(self.pristine, self.path)
        if self.model.external_data:
            shutil.copyfile(
                self.pristine.parent / self.model.external_data, self.path.parent / self.model.external_data
            )
        self.ws.models[self.model.name].pop("session", None)

    def captured(self) -> Prepared:
        if not self.baseline:
            capture.capture_baseline(self.plan())
            self.baseline = True
        return self

    def samples(self) -> list[dict[str, np.ndarray]]:
        """The benchmark samples, as plain dicts of arrays (read once)."""
        if not self.feeds:
            bench = benchsets.open_benchset(self.plan().benchsets_dir, f"{self.model.name}-bench")
            self.feeds = [bench.load_sample(index) for index in range(len(bench))]
        return self.feeds


def prepare(cache: dict[str, Prepared], name: str, tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    """The model's workspace, made once per test module and restored to pristine on every reuse."""
    if name in cache:
        cache[name].restore()
        return cache[name]
    model = MODELS[name]
    pristine = source_file(model)
    root = tmp_path_factory.mktemp(name)
    path = root / "models" / name / pristine.name
    path.parent.mkdir(parents=True)
    ws = Workspace(root)
    ws.benchsets[name] = {
        "name": f"{name}-bench",
        "generate": {"model": str(path.relative_to(root)), "count": 4, "seed": 0, **model.generate},
    }
    ws.models[name] = {"name": name, "path": str(path.relative_to(root)), "benchset": f"{name}-bench"}
    item = Prepared(model, ws, path, pristine)
    item.restore()
    cache[name] = item
    return item


# --- ground truth: plain ONNX Runtime and numpy --------------------------------------------------


@dataclass(frozen=True)
class Truth:
    """What one output of a variant did, over all samples."""

    moved: str  # identical | within | drift
    dtype_changed: bool = False

    @property
    def fails(self) -> bool:
        return self.moved == "drift" or self.dtype_changed


def session(path: Path, options: Mapping[str, Any] | None = None) -> ort.InferenceSession:
    """A plain CPU session; ``options`` are onnxmon session settings spelled as in the config."""
    so = ort.SessionOptions()
    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    options = dict(options or {})
    so.graph_optimization_level = levels[options.pop("graph_optimization_level", "all")]
    so.intra_op_num_threads = options.pop("intra_op_num_threads", 0)
    assert not options, f"ground truth does not know session settings {sorted(options)}"
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def ground_truth(
    item: Prepared, variant: Path | None = None, options: Mapping[str, Any] | None = None
) -> dict[str, Truth]:
    """Per output of the pristine model: how ``variant`` (a file, else the pristine) with ``options`` moved it."""
    before = session(item.pristine)
    after = session(variant or item.path, options)
    names = [o.name for o in before.get_outputs()]
    moved = dict.fromkeys(names, "identical")
    dtype = dict.fromkeys(names, False)
    for feeds in item.samples():
        fitted = fit_inputs(after, feeds)
        for name, a, b in zip(names, after.run(names, fitted), before.run(names, feeds), strict=True):
            kind, changed = classify(a, b)
            moved[name] = max(moved[name], kind, key=ORDER.index)
            dtype[name] = dtype[name] or changed
    return {name: Truth(moved[name], dtype[name]) for name in names}


def fit_inputs(sess: ort.InferenceSession, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Float inputs cast to a float16 model's input dtype (fp16 with keep_io_types=False), as a user would."""
    wanted = {i.name: i.type for i in sess.get_inputs()}
    fitted = dict(feeds)
    for name, value in feeds.items():
        if wanted.get(name) == "tensor(float16)" and value.dtype.kind == "f":
            fitted[name] = value.astype(np.float16)
    return fitted


def classify(actual: Any, expected: Any) -> tuple[str, bool]:
    """(identical | within | drift, float dtype changed) for one output of one sample."""
    if isinstance(expected, dict):  # a map (one row of a ZipMap): same keys, each value alike
        if set(actual) != set(expected):
            return "drift", False
        kinds = [classify(np.asarray(actual[k]), np.asarray(expected[k])) for k in expected]
        return max((k for k, _ in kinds), key=ORDER.index, default="identical"), any(c for _, c in kinds)
    if isinstance(expected, list):  # a sequence: of maps (a ZipMap) or of tensors
        if len(actual) != len(expected):
            return "drift", False
        kinds = [classify(a, b) for a, b in zip(actual, expected, strict=True)]
        return max((k for k, _ in kinds), key=ORDER.index, default="identical"), any(c for _, c in kinds)
    a, b = np.asarray(actual), np.asarray(expected)
    if a.shape != b.shape:
        return "drift", False
    floats = a.dtype.kind == "f" and b.dtype.kind == "f"
    if a.dtype != b.dtype and not floats:
        return "drift", False
    changed = a.dtype != b.dtype
    if not floats:
        return ("identical" if np.array_equal(a, b) else "drift"), False
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if np.array_equal(a64, b64, equal_nan=True):
        return "identical", changed
    same_nonfinite = (np.isnan(a64) & np.isnan(b64)) | (np.isinf(a64) & (a64 == b64))
    with np.errstate(invalid="ignore"):
        close = np.abs(a64 - b64) <= ATOL + RTOL * np.abs(b64)
    return ("within" if bool(np.all(close | same_nonfinite)) else "drift"), changed


# --- what onnxmon said, kept for docs/realmodels.md's model x scenario table ------------------------------


def codes(result: CheckResult) -> set[str]:
    return {r.code for r in result.all_reasons()}


def explain(result: CheckResult) -> str:
    return f"{result.verdict.value}: " + "; ".join(f"{r.code}: {r.detail}" for r in result.all_reasons())


def record(model: str, scenario: str, truth: Mapping[str, Truth] | None, result: CheckResult) -> None:
    """Append one (model, scenario) line to ``$ONNXMON_SCENARIO_LOG`` (scripts/scenario-table reads it)."""
    target = os.environ.get("ONNXMON_SCENARIO_LOG")
    if not target:
        return
    worst = max((t.moved for t in (truth or {}).values()), key=ORDER.index, default="identical")
    line = {
        "model": model,
        "scenario": scenario,
        "truth": worst,
        "dtype_changed": any(t.dtype_changed for t in (truth or {}).values()),
        "verdict": result.verdict.value,
        "reasons": sorted(codes(result)),
    }
    with open(target, "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")


def record_not_applicable(model: str, scenario: str, why: str) -> None:
    target = os.environ.get("ONNXMON_SCENARIO_LOG")
    if target:
        with open(target, "a", encoding="utf-8") as log:
            log.write(json.dumps({"model": model, "scenario": scenario, "not_applicable": why}) + "\n")
