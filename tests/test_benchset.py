"""Managed benchmark sets: generation, versioning, importers, safety, signature checks and the CLI."""

from __future__ import annotations

import base64
import io
import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from monitor.cli import main
from monitor.config.settings import BenchsetConfig, GenerateSpec
from monitor.errors import BenchsetError, ModelError
from monitor.files import benchset_sources, benchsets
from monitor.files.benchsets import InputSpec, check_inputs_fit, materialize, model_signature, open_benchset
from tests import modelzoo


def _generate(model: Path, name: str = "gen", **spec: Any) -> BenchsetConfig:
    return BenchsetConfig.model_validate({"name": name, "generate": {"model": model, **spec}})


@pytest.fixture
def classifier_path(tmp_path: Path) -> Path:
    return modelzoo.save(modelzoo.classifier(), tmp_path / "models" / "classifier.onnx")


@pytest.fixture
def mixed_path(tmp_path: Path) -> Path:
    return modelzoo.save(modelzoo.mixed_inputs(), tmp_path / "models" / "mixed.onnx")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "benchsets"


# --- generate ------------------------------------------------------------------------------


def test_generation_with_the_same_seed_gives_the_same_sha256(tmp_path: Path, classifier_path: Path) -> None:
    cfg = _generate(classifier_path, count=4, seed=7, dims={"batch": 2})
    first = materialize(cfg, tmp_path / "a")
    second = materialize(cfg, tmp_path / "b")
    other_seed = materialize(_generate(classifier_path, count=4, seed=8, dims={"batch": 2}), tmp_path / "c")
    assert first.sha256 == second.sha256
    assert other_seed.sha256 != first.sha256


def test_generation_respects_dims_and_ranges_for_every_dtype(root: Path, mixed_path: Path) -> None:
    cfg = _generate(mixed_path, count=6, dims={"batch": 3}, ranges={"x": (-2.0, -1.0), "ids": (5, 7)})
    bs = materialize(cfg, root)
    assert len(bs) == 6
    for sample in bs.iter_samples():
        assert sample["x"].shape == (3, 4) and sample["x"].dtype == np.float32
        assert np.all((sample["x"] >= -2.0) & (sample["x"] <= -1.0))
        assert sample["ids"].dtype == np.int64 and set(np.unique(sample["ids"])) <= {5, 6, 7}
        assert sample["flag"].dtype == np.bool_


def test_default_ranges_are_unit_interval_for_floats_and_zero_to_nine_for_ints(root: Path, mixed_path: Path) -> None:
    bs = materialize(_generate(mixed_path, count=20, dims={"batch": 4}), root)
    samples = list(bs.iter_samples())
    xs = np.concatenate([s["x"] for s in samples])
    ids = np.concatenate([s["ids"] for s in samples])
    assert xs.min() >= 0.0 and xs.max() < 1.0
    assert ids.min() >= 0 and ids.max() <= 9


def test_a_dim_can_be_fixed_per_input_axis(root: Path, classifier_path: Path) -> None:
    bs = materialize(_generate(classifier_path, count=1, dims={"x:0": 5}), root)
    assert bs.samples[0][0].shape == (5, 16)


def test_edge_cases_add_zeros_range_ends_fp16_overflow_and_denormals(root: Path, mixed_path: Path) -> None:
    cfg = _generate(mixed_path, count=2, dims={"batch": 2}, ranges={"x": (-3.0, 3.0)}, edge_cases=True)
    bs = materialize(cfg, root)
    assert bs.labels == ("random", "random", "zeros", "low", "high", "large", "denormal")
    zeros, low, high, large, denormal = (bs.load_sample(i) for i in range(2, 7))
    assert not zeros["x"].any() and not zeros["ids"].any()
    assert np.all(low["x"] == -3.0) and np.all(high["x"] == 3.0)
    with np.errstate(over="ignore"):
        assert np.all(np.abs(large["x"]) == 7e4) and np.isinf(large["x"].astype(np.float16)).all()
    assert (large["x"] < 0).any() and (large["x"] > 0).any()
    tiny = np.abs(denormal["x"])
    assert np.all((tiny > 0) & (tiny < np.finfo(np.float32).smallest_normal))
    assert np.all(large["ids"] == 0) and np.all(denormal["ids"] == 0)  # non-floats keep their range's low


def test_a_dynamic_dim_without_a_value_names_the_input_and_the_dim(root: Path, classifier_path: Path) -> None:
    with pytest.raises(BenchsetError, match=r"input 'x' has dynamic dim 'batch' \(axis 0\).*generate\.dims\.batch"):
        materialize(_generate(classifier_path), root)


def test_an_unnamed_dynamic_dim_asks_for_the_input_axis_key(tmp_path: Path, root: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "unnamed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
    )
    model = modelzoo.save(helper.make_model(graph), tmp_path / "unnamed.onnx")
    with pytest.raises(BenchsetError, match=r"axis 0 is dynamic and unnamed; set generate\.dims\['x:0'\]"):
        materialize(_generate(model), root)


def test_a_range_for_an_unknown_input_is_an_error(root: Path, classifier_path: Path) -> None:
    with pytest.raises(BenchsetError, match=r"generate\.ranges names input\(s\) \['img'\]; model inputs are \['x'\]"):
        materialize(_generate(classifier_path, dims={"batch": 1}, ranges={"img": (0, 1)}), root)


# --- versions ------------------------------------------------------------------------------


def test_an_unchanged_declaration_returns_the_same_version(root: Path, classifier_path: Path) -> None:
    cfg = _generate(classifier_path, count=2, dims={"batch": 1})
    first = materialize(cfg, root)
    again = benchsets.ensure(cfg, root)
    assert (again.version, again.sha256, again.created_at) == (1, first.sha256, first.created_at)
    assert sorted(p.name for p in (root / "gen").iterdir()) == ["v1"]


def test_editing_the_declaration_creates_version_2_and_version_1_stays_readable(
    root: Path, classifier_path: Path
) -> None:
    v1 = materialize(_generate(classifier_path, count=2, dims={"batch": 1}), root)
    v2 = materialize(_generate(classifier_path, count=3, dims={"batch": 1}), root)
    assert (v1.version, v2.version, len(v2)) == (1, 2, 3)
    assert open_benchset(root, "gen").version == 2
    old = open_benchset(root, "gen", 1)
    assert old.sha256 == v1.sha256 and benchsets.verify(old) == []
    assert [b.version for b in benchsets.list_benchsets(root, all_versions=True)] == [1, 2]


def test_changing_a_source_file_creates_a_new_version(tmp_path: Path, root: Path) -> None:
    np.savez(tmp_path / "s.npz", x=np.zeros((1, 16), np.float32))
    cfg = BenchsetConfig(name="files", npz=[tmp_path / "s.npz"])
    assert materialize(cfg, root).version == 1
    np.savez(tmp_path / "s.npz", x=np.ones((1, 16), np.float32))
    assert materialize(cfg, root).version == 2


def test_a_half_written_version_left_by_a_crash_is_invisible(root: Path, classifier_path: Path) -> None:
    cfg = _generate(classifier_path, count=1, dims={"batch": 1})
    materialize(cfg, root)
    crashed = root / "gen" / ".tmp-v2-abcd"
    crashed.mkdir()
    (crashed / "s00000_0.npy").write_bytes(b"half")
    assert open_benchset(root, "gen").version == 1
    assert materialize(cfg, root).version == 1
    assert [b.name for b in benchsets.list_benchsets(root)] == ["gen"]


def test_a_missing_set_or_version_lists_what_exists(root: Path, classifier_path: Path) -> None:
    materialize(_generate(classifier_path, count=1, dims={"batch": 1}), root)
    with pytest.raises(BenchsetError, match=r"no benchset 'nope' .* benchsets are \['gen'\]"):
        open_benchset(root, "nope")
    with pytest.raises(BenchsetError, match=r"no version 4; versions are \[1\]"):
        open_benchset(root, "gen", 4)


# --- safety --------------------------------------------------------------------------------


@pytest.fixture
def small_set(root: Path, classifier_path: Path) -> benchsets.Benchset:
    return materialize(_generate(classifier_path, count=2, dims={"batch": 1}), root)


def _edit_manifest(bs: benchsets.Benchset, **tensor0: Any) -> None:
    path = bs.directory / "manifest.yaml"
    manifest = yaml.safe_load(path.read_text())
    manifest["samples"][0]["tensors"][0].update(tensor0)
    path.write_text(yaml.safe_dump(manifest))


@pytest.mark.parametrize("bad_path", ["../x.npy", "../../etc/passwd", "/etc/passwd"])
def test_manifest_paths_escaping_the_set_are_rejected(small_set: benchsets.Benchset, bad_path: str) -> None:
    _edit_manifest(small_set, file=bad_path)
    with pytest.raises(BenchsetError, match="must be relative and stay inside"):
        open_benchset(small_set.directory.parent.parent, "gen")


def test_a_symlink_pointing_outside_the_set_is_rejected(tmp_path: Path, small_set: benchsets.Benchset) -> None:
    target = small_set.directory / small_set.samples[0][0].file
    outside = tmp_path / "outside.npy"
    outside.write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(BenchsetError, match="outside"):
        small_set.load_sample(0)
    assert any("outside" in problem for problem in benchsets.verify(small_set))


def test_a_non_numeric_dtype_in_the_manifest_is_rejected(small_set: benchsets.Benchset) -> None:
    _edit_manifest(small_set, dtype="object")
    with pytest.raises(BenchsetError, match=r"samples\[0\]\.tensors\[0\]\.dtype 'object' is not a plain"):
        open_benchset(small_set.directory.parent.parent, "gen")


def test_a_truncated_tensor_file_is_rejected(small_set: benchsets.Benchset) -> None:
    path = small_set.directory / small_set.samples[1][0].file
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(BenchsetError, match=r"s00001_0\.npy is truncated"):
        small_set.load_sample(1)


def test_a_checksum_mismatch_is_found_by_verify_and_by_load_sample(small_set: benchsets.Benchset) -> None:
    path = small_set.directory / small_set.samples[0][0].file
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size, different content
    path.write_bytes(bytes(data))
    problems = benchsets.verify(small_set)
    assert (
        len(problems) == 1
        and "s00000_0.npy has sha256" in problems[0]
        and small_set.samples[0][0].sha256 in problems[0]
    )
    with pytest.raises(BenchsetError, match=r"s00000_0\.npy has sha256 .*, expected"):
        small_set.load_sample(0)
    assert small_set.load_sample(0, verify=False)["x"].shape == (1, 16)


# --- manifest schema -----------------------------------------------------------------------


def _write_raw_manifest(bs: benchsets.Benchset, text: str) -> Path:
    path = bs.directory / "manifest.yaml"
    path.write_text(text)
    return path


def test_a_manifest_without_a_version_names_the_missing_field(small_set: benchsets.Benchset) -> None:
    path = _write_raw_manifest(small_set, "format: 1\nname: s")  # the fuzzer's find: this was KeyError: 'version'
    with pytest.raises(BenchsetError, match=rf"^{path}: version is missing; created_at is missing"):
        open_benchset(small_set.directory.parent.parent, "gen")


@pytest.mark.parametrize(
    ("tensor0", "message"),
    [
        ({"shape": [1, -1]}, r"samples\[0\]\.tensors\[0\]\.shape\[1\] must be greater than or equal to 0, got -1"),
        ({"shape": [1, True]}, r"samples\[0\]\.tensors\[0\]\.shape\[1\] must be a valid integer, got bool"),
        ({"shape": "1x16"}, r"samples\[0\]\.tensors\[0\]\.shape must be a list of non-negative integers, got str"),
        ({"sha256": "XYZ"}, r"samples\[0\]\.tensors\[0\]\.sha256 must be 64 lowercase hex digits, got 'XYZ'"),
        ({"name": 7}, r"samples\[0\]\.tensors\[0\]\.name must be a valid string, got int"),
        ({"file": "x" * 5000}, r"samples\[0\]\.tensors\[0\]\.file must have at most 4096 characters"),
    ],
)
def test_a_malformed_tensor_entry_names_the_file_the_field_and_the_expectation(
    small_set: benchsets.Benchset, tensor0: dict[str, Any], message: str
) -> None:
    _edit_manifest(small_set, **tensor0)
    with pytest.raises(BenchsetError, match=rf"^{small_set.directory / 'manifest.yaml'}: {message}"):
        open_benchset(small_set.directory.parent.parent, "gen")


@pytest.mark.parametrize(
    ("top", "message"),
    [
        ({"version": "1"}, r"version must be a valid integer, got str"),
        ({"format": 2}, r"format 2 is not supported \(expected 1\)"),
        ({"samples": {"label": "x"}}, r"samples must be a valid list, got dict"),
        ({"name": "other"}, r"says 'other' v1, expected 'gen' v1"),
    ],
)
def test_a_malformed_top_level_field_names_the_file_and_the_field(
    small_set: benchsets.Benchset, top: dict[str, Any], message: str
) -> None:
    path = small_set.directory / "manifest.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(path.read_text()) | top))
    with pytest.raises(BenchsetError, match=rf"^{path}: {message}"):
        open_benchset(small_set.directory.parent.parent, "gen")


def _billion_laughs() -> str:
    """The classic: ten levels of ten aliases each, 10**9 strings from under 1 KB."""
    levels = ['lol0: &lol0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"lol{n}: &lol{n} [{', '.join([f'*lol{n - 1}'] * 10)}]" for n in range(1, 10)]
    return "format: 1\nname: gen\nversion: 1\n" + "\n".join(levels) + "\nsamples: *lol9\n"


def _aliased_samples(bs: benchsets.Benchset) -> str:
    """A well-formed manifest whose 1000 samples of 1000 tensors each are aliases: 10**6 entries in 37 KB."""
    entry = bs.samples[0][0]
    manifest = yaml.safe_load((bs.directory / "manifest.yaml").read_text())
    del manifest["samples"]
    tensor = f"{{name: {entry.name}, file: {entry.file}, dtype: {entry.dtype}, shape: [1, 16], sha256: {entry.sha256}}}"
    tensors = f"tensors: &tensors [&t0 {tensor}, {', '.join(['*t0'] * 999)}]\n"
    samples = "samples: [" + ", ".join(["{label: x, tensors: *tensors}"] * 1000) + "]\n"
    return yaml.safe_dump(manifest, sort_keys=False) + tensors + samples


@pytest.mark.parametrize("build", [lambda bs: _billion_laughs(), _aliased_samples], ids=["lol", "samples"])
def test_yaml_alias_amplification_in_a_manifest_is_refused_fast(small_set: benchsets.Benchset, build: Any) -> None:
    path = _write_raw_manifest(small_set, build(small_set))
    root = small_set.directory.parent.parent
    started = time.monotonic()
    with pytest.raises(BenchsetError, match=rf"^benchset manifest {path} cannot be read: line \d+.*aliases"):
        open_benchset(root, "gen")
    assert benchsets.list_benchsets(root) == []  # `benchset list` skips it, and does not hang
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("levels", [100, 5000])
def test_yaml_nested_deeper_than_the_bound_is_refused(small_set: benchsets.Benchset, levels: int) -> None:
    path = _write_raw_manifest(small_set, "format: 1\nx: " + "[" * levels + "]" * levels + "\n")
    # libyaml stops at its own bound (1000) while scanning ahead; below it, onnxmon's (64) refuses
    refused = "nesting deeper than 64" if levels < 1000 else "(nesting deeper than 64|exceeded maximum nesting depth)"
    with pytest.raises(BenchsetError, match=rf"^benchset manifest {path} cannot be read: .*{refused}"):
        open_benchset(small_set.directory.parent.parent, "gen")


@pytest.mark.parametrize(
    "text",
    ["created_at: 2020-02-30\n", "version: " + "1" * 5000 + "\n", "\x00format: 1\n", "shape: !!float x\n"],
    ids=["impossible-date", "5000-digit-int", "nul-byte", "bad-float"],
)
def test_yaml_that_parses_but_cannot_be_built_is_a_benchset_error(small_set: benchsets.Benchset, text: str) -> None:
    path = _write_raw_manifest(small_set, text)
    with pytest.raises(BenchsetError, match=rf"^benchset manifest {path} cannot be read: "):
        open_benchset(small_set.directory.parent.parent, "gen")


def test_the_committed_example_sets_still_open_and_verify() -> None:
    examples = Path(__file__).resolve().parents[1] / "examples" / "benchsets"
    found = benchsets.list_benchsets(examples, all_versions=True)
    assert len(found) == len(list(examples.glob("*/v*/manifest.yaml"))) > 0
    assert all(benchsets.verify(bs) == [] for bs in found)


# --- the model is read once ----------------------------------------------------------------


@pytest.fixture
def onnx_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``onnx.load`` call from here on, by path."""
    loads: list[str] = []
    real = onnx.load

    def counting(path: Any, *args: Any, **kwargs: Any) -> onnx.ModelProto:
        loads.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(onnx, "load", counting)
    return loads


def test_materialize_reads_a_generate_model_once(root: Path, classifier_path: Path, onnx_loads: list[str]) -> None:
    cfg = _generate(classifier_path, count=2, dims={"batch": 1})
    materialize(cfg, root)  # a new version: declaration and generation share one read
    assert onnx_loads == [str(classifier_path)]
    materialize(cfg, root)  # unchanged: the declaration's read only
    assert onnx_loads == [str(classifier_path)] * 2


def test_materialize_reads_the_model_beside_onnx_test_data_once(
    tmp_path: Path, root: Path, onnx_loads: list[str]
) -> None:
    data = tmp_path / "test_classifier"
    modelzoo.save(modelzoo.classifier(), data / "model.onnx")
    _write_test_data(data, [{"": np.zeros((2, 16), np.float32)}], "input", named=False)
    assert list(materialize(BenchsetConfig(name="otd", onnx_test_data=data), root).load_sample(0)) == ["x"]
    assert onnx_loads == [str(data / "model.onnx")]


def test_generate_draws_from_the_signature_it_is_given_without_reading_the_model(tmp_path: Path) -> None:
    spec = GenerateSpec.model_validate({"model": tmp_path / "absent.onnx", "count": 2, "dims": {"batch": 3}})
    signature = [InputSpec("x", np.dtype(np.float32), ("batch", 4))]
    samples, labels = benchset_sources.generate(spec, signature, where="test")
    assert labels == ["random", "random"] and [s["x"].shape for s in samples] == [(3, 4), (3, 4)]


def test_npz_with_a_pickled_object_array_is_rejected_naming_file_and_key(tmp_path: Path, root: Path) -> None:
    np.savez(tmp_path / "evil.npz", x=np.array([{"boom": 1}], dtype=object))
    with pytest.raises(BenchsetError, match=r"evil\.npz key 'x' holds dtype object"):
        materialize(BenchsetConfig(name="evil", npz=[tmp_path / "evil.npz"]), root)


def test_npz_files_with_different_keys_are_rejected(tmp_path: Path, root: Path) -> None:
    np.savez(tmp_path / "a.npz", x=np.zeros(2))
    np.savez(tmp_path / "b.npz", y=np.zeros(2))
    with pytest.raises(BenchsetError, match=r"b\.npz has keys \['y'\], the first file has \['x'\]"):
        materialize(BenchsetConfig(name="mixed", npz=[tmp_path / "a.npz", tmp_path / "b.npz"]), root)


# --- importers -----------------------------------------------------------------------------


def _write_test_data(directory: Path, sets: list[dict[str, np.ndarray]], prefix: str, named: bool = True) -> None:
    for n, sample in enumerate(sets):
        set_dir = directory / f"test_data_set_{n}"
        set_dir.mkdir(parents=True, exist_ok=True)
        for k, (name, array) in enumerate(sample.items()):
            tensor = numpy_helper.from_array(array, name if named else "")
            (set_dir / f"{prefix}_{k}.pb").write_bytes(tensor.SerializeToString())


def test_onnx_test_data_round_trips_inputs_and_outputs(tmp_path: Path, root: Path) -> None:
    data = tmp_path / "test_classifier"
    inputs = [{"x": np.full((1, 16), n, np.float32)} for n in range(3)]
    outputs = [{"logits": np.full((1, 10), n, np.float32), "prob": np.full((1, 10), 0.1, np.float32)} for n in range(3)]
    _write_test_data(data, inputs, "input")
    _write_test_data(data, outputs, "output")
    bs = materialize(BenchsetConfig(name="otd", onnx_test_data=data), root)
    assert bs.labels == ("test_data_set_0", "test_data_set_1", "test_data_set_2")
    for want, got in zip(inputs, bs.iter_samples(), strict=True):
        np.testing.assert_array_equal(got["x"], want["x"])
    read_back = benchsets.read_onnx_test_outputs(data)
    assert [sorted(s) for s in read_back] == [["logits", "prob"]] * 3
    np.testing.assert_array_equal(read_back[2]["logits"], outputs[2]["logits"])


def test_unnamed_test_data_tensors_take_the_names_of_the_model_beside_them(tmp_path: Path, root: Path) -> None:
    data = tmp_path / "test_classifier"
    modelzoo.save(modelzoo.classifier(), data / "model.onnx")
    _write_test_data(data, [{"": np.zeros((2, 16), np.float32)}], "input", named=False)
    _write_test_data(data, [{"": np.zeros((2, 10), np.float32), " ": np.ones((2, 10), np.float32)}], "output", False)
    assert list(materialize(BenchsetConfig(name="otd", onnx_test_data=data), root).load_sample(0)) == ["x"]
    assert list(benchsets.read_onnx_test_outputs(data)[0]) == ["logits", "prob"]
    assert list(benchsets.read_onnx_test_outputs(data, output_names=["a", "b"])[0]) == ["a", "b"]


def _polygraphy_array(array: np.ndarray) -> dict[str, str]:
    """Exactly Polygraphy's JSON encoder for an ndarray: base64 of ``np.save`` bytes plus the class marker."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return {"array": base64.b64encode(buffer.getvalue()).decode(), "polygraphy_class": "ndarray"}


# `polygraphy run --save-inputs` output for one iteration of x = [[1.5, -2.0]] (float32), verbatim
# (Polygraphy's JSON: 4-space indent, each ndarray as base64 of its np.save bytes plus a class marker).
_FIXTURE_ARRAY = (
    "k05VTVBZAQB2AHsnZGVzY3InOiAnPGY0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDEsIDIpLCB9ICAg"
    "ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAMA/AAAAwA=="
)
POLYGRAPHY_FIXTURE = (
    '[\n    {\n        "x": {\n            "array": "'
    + _FIXTURE_ARRAY
    + '",\n            "polygraphy_class": "ndarray"\n        }\n    }\n]'
)


def test_a_polygraphy_save_inputs_fixture_decodes(tmp_path: Path, root: Path) -> None:
    (tmp_path / "inputs.json").write_text(POLYGRAPHY_FIXTURE)
    bs = materialize(BenchsetConfig(name="poly", polygraphy_json=tmp_path / "inputs.json"), root)
    np.testing.assert_array_equal(bs.load_sample(0)["x"], np.array([[1.5, -2.0]], np.float32))


def test_polygraphy_json_with_several_iterations_and_the_legacy_marker_decodes(tmp_path: Path, root: Path) -> None:
    first = {"x": _polygraphy_array(np.arange(4, dtype=np.float32)), "ids": _polygraphy_array(np.arange(2))}
    legacy = _polygraphy_array(np.ones(4, np.float32))
    del legacy["polygraphy_class"]
    legacy["__polygraphy_encoded_ndarray"] = "polygraphy_serialized_json_type"
    (tmp_path / "inputs.json").write_text(json.dumps([first, {"x": legacy, "ids": first["ids"]}]))
    bs = benchsets.import_files("poly", [tmp_path / "inputs.json"], root, "polygraphy-json")
    assert len(bs) == 2
    np.testing.assert_array_equal(bs.load_sample(1)["x"], np.ones(4, np.float32))


def test_polygraphy_json_with_a_pickled_array_is_rejected(tmp_path: Path, root: Path) -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.array([object()], dtype=object), allow_pickle=True)
    encoded = {"array": base64.b64encode(buffer.getvalue()).decode(), "polygraphy_class": "ndarray"}
    (tmp_path / "inputs.json").write_text(json.dumps([{"x": encoded}]))
    with pytest.raises(BenchsetError, match=r"inputs\.json \[0\] 'x' holds dtype object"):
        benchsets.import_files("poly", [tmp_path / "inputs.json"], root, "polygraphy-json")


# --- signature -----------------------------------------------------------------------------


def test_model_signature_reads_names_dtypes_and_symbolic_dims(mixed_path: Path) -> None:
    assert model_signature(mixed_path) == [
        InputSpec("x", np.dtype("float32"), ("batch", 4)),
        InputSpec("ids", np.dtype("int64"), ("batch", 2)),
        InputSpec("flag", np.dtype("bool"), ("batch", 2)),
    ]


SIGNATURE = [
    InputSpec("img", np.dtype("float32"), ("batch", 3, 256, 256)),
    InputSpec("k", np.dtype("int64"), ("batch",)),
]
OK = {"img": np.zeros((1, 3, 256, 256), np.float32), "k": np.zeros(1, np.int64)}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"img": np.zeros((1, 3, 224, 224), np.float32)},
            "input 'img' has shape (1,3,224,224), model wants (batch,3,256,256)",
        ),
        (
            {"img": np.zeros((3, 256, 256), np.float32)},
            "input 'img' has shape (3,256,256), model wants (batch,3,256,256)",
        ),
        ({"img": np.zeros((1, 3, 256, 256), np.float64)}, "input 'img' has dtype float64, model wants float32"),
        ({"k": np.zeros(2, np.int64)}, "input 'k' has dim 'batch' = 2, but input 'img' has 'batch' = 1"),
        ({"k": None}, "lacks input(s) ['k']; model inputs are ['img', 'k']"),
        ({"extra": np.zeros(1)}, "has input(s) ['extra'] the model does not take; model inputs are ['img', 'k']"),
    ],
)
def test_inputs_that_do_not_fit_say_exactly_how(change: dict[str, Any], message: str) -> None:
    sample = {name: array for name, array in (OK | change).items() if array is not None}
    with pytest.raises(ModelError) as caught:
        check_inputs_fit(sample, SIGNATURE, where="benchset 'x'")
    assert str(caught.value) == f"benchset 'x' {message}"


def test_inputs_that_fit_pass_silently() -> None:
    check_inputs_fit(OK, SIGNATURE, where="benchset 'x'")


def test_a_session_remembers_only_layouts_that_fit(tmp_path: Path) -> None:
    """``Session.check_inputs`` skips the full check for a layout (names, dtypes, shapes) that fitted
    before; one that did not fit is refused every time, with the same message, fitted one or not."""
    from monitor.config.schema import ProviderSpec
    from monitor.runtime.session import Session

    modelzoo.save(modelzoo.classifier(), tmp_path / "classifier.onnx")
    session = Session(tmp_path / "classifier.onnx", [ProviderSpec(name="CPUExecutionProvider")])
    fits = {"x": np.zeros((2, 16), np.float32)}
    wrong_shape = {"x": np.zeros((2, 15), np.float32)}
    wrong_dtype = {"x": np.zeros((2, 16), np.float64).astype(np.int32)}
    for _ in range(2):
        session.check_inputs(fits)
        for bad, message in ((wrong_shape, "has shape (2,15)"), (wrong_dtype, "has dtype int32")):
            with pytest.raises(ModelError, match=re.escape(message)):
                session.check_inputs(bad)
    with pytest.raises(ModelError, match="lacks input"):
        session.check_inputs({"y": fits["x"]})
    assert session.run(fits)["prob"].shape == (2, 10)


# --- CLI -----------------------------------------------------------------------------------


def _config(tmp_path: Path, count: int = 2) -> Path:
    modelzoo.save(modelzoo.classifier(), tmp_path / "classifier.onnx")
    config = {
        "store": {"benchsets_dir": "sets"},
        "benchsets": [{"name": "gen", "generate": {"model": "classifier.onnx", "count": count, "dims": {"batch": 1}}}],
    }
    path = tmp_path / "onnxmon.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_cli_create_list_and_verify_succeed_on_a_fresh_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(_config(tmp_path))
    assert main(["benchset", "create", "gen", "-c", config]) == 0
    assert "gen v1 (created): 2 sample(s), sha256 " in capsys.readouterr().out
    assert main(["benchset", "create", "gen", "-c", config]) == 0
    assert "gen v1 (unchanged)" in capsys.readouterr().out
    assert main(["benchset", "list", "--json", "-c", config]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(row["name"], row["version"], row["samples"]) for row in listed] == [("gen", 1, 2)]
    assert main(["benchset", "verify", "gen", "-c", config]) == 0
    assert "gen v1: ok" in capsys.readouterr().out


def test_cli_verify_exits_1_and_prints_each_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(_config(tmp_path))
    main(["benchset", "create", "gen", "-c", config])
    for file in ("s00000_0.npy", "s00001_0.npy"):
        path = tmp_path / "sets" / "gen" / "v1" / file
        path.write_bytes(path.read_bytes()[:-1] + b"\x01")
    capsys.readouterr()
    assert main(["benchset", "verify", "gen", "-c", config]) == 1
    out = capsys.readouterr().out
    assert "s00000_0.npy has sha256" in out and "s00001_0.npy has sha256" in out and "2 problem(s)" in out


def test_cli_import_guesses_npz_and_unknown_sets_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.savez(tmp_path / "a.npz", x=np.zeros((1, 16), np.float32))
    np.savez(tmp_path / "b.npz", x=np.ones((1, 16), np.float32))
    sets = str(tmp_path / "sets")
    assert main(["benchset", "import", "mine", str(tmp_path / "a.npz"), str(tmp_path / "b.npz"), "--root", sets]) == 0
    assert "mine v1 (created): 2 sample(s)" in capsys.readouterr().out
    assert main(["benchset", "verify", "nope", "--root", sets]) == 2
    assert "no benchset 'nope'" in capsys.readouterr().err
    assert main(["benchset", "import", "bad/name", str(tmp_path / "a.npz"), "--root", sets]) == 2
