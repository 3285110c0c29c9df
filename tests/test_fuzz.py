"""Fuzzing the untrusted inputs: config files and env overrides, benchset manifests, tensor files.

Each reader has one contract: a valid input gives a value, anything else raises the module's
``MonitorError`` (``ConfigError``, ``BenchsetError``) naming what is wrong; never another
exception, never a traceback, never an allocation larger than the file could hold. The HTTP
API is fuzzed from its own OpenAPI document with schemathesis (last section).

Budgets are modest so the suite stays fast; ``ONNXMON_FUZZ_EXAMPLES=5000`` raises every one of
them for a long run (``ONNXMON_FUZZ_EXAMPLES=5000 .venv/bin/pytest tests/test_fuzz.py``).

Bugs the fuzzers found are pinned by the ``KNOWN_ESCAPES`` table and one strict-xfail
regression test each: the property tests tolerate exactly those escapes so the suite stays
green, and the regression test turns red (XPASS) the day the bug is fixed, to remove both.
"""

from __future__ import annotations

import copy
import io
import math
import os
import shutil
import struct
import tracemalloc
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.lib.format as npy_format
import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from schemathesis.schemas import BaseSchema

from monitor.api.app import create_app
from monitor.config.settings import BenchsetConfig, Settings, apply_env_overrides, from_mapping
from monitor.config.settings import load as load_settings
from monitor.errors import BenchsetError, ConfigError, MonitorError
from monitor.files import benchsets, tensors
from tests import modelzoo
from tests.test_metrics import RealDaemon, Scenario, build_scenario, migrated_store

EXAMPLES = int(os.environ.get("ONNXMON_FUZZ_EXAMPLES", "0"))


def budget(default: int) -> settings:
    """Hypothesis settings: ``default`` examples, or a long run's (``ONNXMON_FUZZ_EXAMPLES``, the ``fuzz`` profile)."""
    profile = settings.default.max_examples
    return settings(
        max_examples=EXAMPLES or (profile if profile > 1000 else default),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# Escapes the fuzzers found that are not fixed yet: (exception type, text in its message).
# Each has a strict-xfail regression test below; remove the entry when that test XPASSes.
KNOWN_ESCAPES: tuple[tuple[type[BaseException], str], ...] = ()


def expect_value_or(error: type[MonitorError], call: Callable[[], Any]) -> Any:
    """Run ``call``; a value or ``error`` is fine, a known escape is tolerated, anything else fails."""
    try:
        return call()
    except error:
        return None
    except Exception as exc:
        if any(isinstance(exc, kind) and text in str(exc) for kind, text in KNOWN_ESCAPES):
            return None
        raise AssertionError(f"{type(exc).__name__} escaped instead of {error.__name__}: {exc}") from exc


# --- strategies ------------------------------------------------------------------------------------

CONFIG_KEYS = sorted(
    {"store", "api", "daemon", "defaults", "benchsets", "models", "url", "token", "token_file", "schedule"}
    | {"interval", "cron", "jitter", "timeout", "repeats", "tolerance", "atol", "rtol", "topk", "k", "name"}
    | {"path", "benchset", "providers", "generate", "npz", "model", "count", "dims", "ranges", "outputs"}
    | {"default", "session", "options", "mode", "workers", "port", "host", "memory_limit_mb", "retention_passing"}
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["15m", "-1s", "1e400s", "*/5 * * * *", "99 * * * *", "CPUExecutionProvider", "a\x00b", ""]),
)
yaml_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(CONFIG_KEYS), st.text(max_size=10)), children, max_size=5),
    ),
    max_leaves=25,
)
config_mappings = st.dictionaries(st.sampled_from(CONFIG_KEYS), yaml_values, max_size=6)

VALID_CONFIG = {
    "store": {"url": "sqlite:///h.db", "retention_passing": "7d"},
    "api": {"port": 9090, "token_file": "token"},
    "defaults": {"timeout": "30s", "schedule": {"interval": "15m"}, "tolerance": {"atol": 1e-4}},
    "benchsets": [{"name": "b", "generate": {"model": "m.onnx", "count": 2, "dims": {"batch": 1}}}],
    "models": [
        {
            "name": "m",
            "path": "m.onnx",
            "benchset": "b",
            "providers": ["CPUExecutionProvider"],
            "tolerance": {"outputs": {"logits": {"rtol": 0.0, "topk": {"k": 1}}}},
            "schedule": {"cron": "*/5 * * * *", "jitter": "10s"},
        }
    ],
}


@st.composite
def mutated(draw: st.DrawFn, document: Any) -> Any:
    """``document`` with one node replaced by an arbitrary value, or one key dropped."""
    document = copy.deepcopy(document)
    node, path = document, []
    while isinstance(node, dict | list) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else list(range(len(node)))))
        path.append(key)
        node = node[key]
    if not path:
        return draw(yaml_values)
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(yaml_values)
    return document


@st.composite
def byte_mutations(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with a few bytes flipped, inserted or deleted (header-heavy: most edits hit the start)."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        limit = len(out) if draw(st.booleans()) else min(len(out), 160)
        at = draw(st.integers(0, max(0, limit - 1)))
        action = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if action == "flip" and out:
            out[at] = draw(st.integers(0, 255))
        elif action == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif action == "delete" and out:
            del out[at : at + draw(st.integers(1, 8))]
        elif action == "truncate":
            del out[at:]
    return bytes(out)


# --- config ----------------------------------------------------------------------------------------


@pytest.mark.slow
@budget(150)
@given(raw=config_mappings)
def test_any_mapping_gives_settings_or_a_config_error(raw: dict[str, Any]) -> None:
    result = expect_value_or(ConfigError, lambda: from_mapping(raw))
    assert result is None or isinstance(result, Settings)


@budget(100)
@given(raw=mutated(VALID_CONFIG))
def test_a_mutated_valid_config_gives_settings_or_a_config_error(raw: Any) -> None:
    if not isinstance(raw, dict):
        raw = {"models": raw}
    expect_value_or(ConfigError, lambda: from_mapping(raw))


@budget(100)
@given(text=st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("latin-1"))))
def test_any_text_as_a_config_file_gives_settings_or_a_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "onnxmon.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    expect_value_or(ConfigError, lambda: load_settings(path, environ={}))


@budget(100)
@given(edited=byte_mutations(yaml.safe_dump(VALID_CONFIG).encode()))
def test_a_byte_mutated_config_file_gives_settings_or_a_config_error(tmp_path: Path, edited: bytes) -> None:
    path = tmp_path / "onnxmon.yaml"
    path.write_bytes(edited)
    expect_value_or(ConfigError, lambda: load_settings(path, environ={}))


env_keys = st.lists(
    st.one_of(st.sampled_from(CONFIG_KEYS), st.sampled_from(["0", "1", "99", ""]), st.text("AZaz_09", max_size=6)),
    min_size=1,
    max_size=4,
).map(lambda parts: "ONNXMON_" + "__".join(parts).upper())


@pytest.mark.slow
@budget(150)
@given(
    base=st.one_of(st.just(VALID_CONFIG), config_mappings),
    environ=st.dictionaries(env_keys, st.text(max_size=40), max_size=4),
)
def test_env_overrides_with_any_keys_and_values_give_settings_or_a_config_error(
    base: dict[str, Any], environ: dict[str, str]
) -> None:
    expect_value_or(ConfigError, lambda: from_mapping(apply_env_overrides(copy.deepcopy(base), environ)))


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "onnxmon.yaml"
    path.write_bytes(b"\x80store: {}\n")
    with pytest.raises(ConfigError, match=r"onnxmon\.yaml"):
        load_settings(path, environ={})


@pytest.mark.parametrize(
    "defaults",
    [
        {"schedule": {"interval": math.nan}},
        {"schedule": {"interval": math.inf}, "timeout": 5},
        {"schedule": {"interval": "1" * 400 + "s"}, "timeout": 5},  # float("1"*400) is inf
        {"timeout": math.nan},
        {"schedule": {"interval": "15m", "jitter": math.inf}},
    ],
)
def test_a_non_finite_duration_is_a_config_error(defaults: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        from_mapping({"defaults": defaults} | {k: VALID_CONFIG[k] for k in ("benchsets", "models")})


# --- benchset manifests ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def valid_set(tmp_path_factory: pytest.TempPathFactory) -> benchsets.Benchset:
    """A real two-sample set generated from a real model, to mutate copies of."""
    root = tmp_path_factory.mktemp("benchsets")
    model = modelzoo.save(modelzoo.classifier(), root / "clf.onnx")
    cfg = BenchsetConfig.model_validate(
        {"name": "small", "generate": {"model": model, "count": 2, "dims": {"batch": 2}}}
    )
    return benchsets.materialize(cfg, root / "sets")


@pytest.fixture
def scratch_set(valid_set: benchsets.Benchset, tmp_path: Path) -> Iterator[Path]:
    """A copy of the valid set's version directory whose manifest a test overwrites."""
    target = tmp_path / "sets" / valid_set.name / f"v{valid_set.version}"
    shutil.copytree(valid_set.directory, target)
    yield target


def open_and_use(root: Path, name: str, version: int) -> None:
    """What a check does with a set: open it, verify it, load every sample."""
    opened = benchsets.open_benchset(root, name, version)
    benchsets.verify(opened)
    for index in range(len(opened)):
        opened.load_sample(index)


def manifest_of(valid_set: benchsets.Benchset) -> dict[str, Any]:
    loaded = yaml.safe_load((valid_set.directory / benchsets.MANIFEST).read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def fuzz_manifest(scratch_set: Path, valid_set: benchsets.Benchset, content: bytes) -> None:
    (scratch_set / benchsets.MANIFEST).write_bytes(content)
    expect_value_or(BenchsetError, lambda: open_and_use(scratch_set.parent.parent, valid_set.name, valid_set.version))


def test_the_unmutated_copy_opens_verifies_and_loads(scratch_set: Path, valid_set: benchsets.Benchset) -> None:
    open_and_use(scratch_set.parent.parent, valid_set.name, valid_set.version)


@pytest.mark.slow
@budget(100)
@given(data=st.data())
def test_a_mutated_manifest_gives_a_valid_set_or_a_benchset_error(
    scratch_set: Path, valid_set: benchsets.Benchset, data: st.DataObject
) -> None:
    manifest = data.draw(mutated(manifest_of(valid_set)))
    fuzz_manifest(scratch_set, valid_set, yaml.safe_dump(manifest, allow_unicode=True).encode())


class Drawn:
    """Stands in for ``st.data()`` in an ``@example``: every draw gives ``value``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def draw(self, strategy: Any, label: Any = None) -> Any:
        return self.value


@pytest.mark.slow
@budget(80)
@given(data=st.data())
@example(data=Drawn(b"format: 1\nname: s"))  # the original truncated here raised KeyError: 'version'
def test_a_byte_mutated_manifest_gives_a_valid_set_or_a_benchset_error(
    scratch_set: Path, valid_set: benchsets.Benchset, data: st.DataObject
) -> None:
    original = (valid_set.directory / benchsets.MANIFEST).read_bytes()
    fuzz_manifest(scratch_set, valid_set, data.draw(byte_mutations(original)))


@budget(60)
@given(document=yaml_values)
def test_an_arbitrary_yaml_manifest_gives_a_benchset_error(
    scratch_set: Path, valid_set: benchsets.Benchset, document: Any
) -> None:
    fuzz_manifest(scratch_set, valid_set, yaml.safe_dump(document, allow_unicode=True).encode())


def test_a_manifest_dtype_numpy_cannot_parse_is_a_benchset_error(
    scratch_set: Path, valid_set: benchsets.Benchset
) -> None:
    manifest = manifest_of(valid_set)
    manifest["samples"][0]["tensors"][0]["dtype"] = "i4, ("
    (scratch_set / benchsets.MANIFEST).write_text(yaml.safe_dump(manifest), encoding="utf-8")
    with pytest.raises(BenchsetError):
        benchsets.open_benchset(scratch_set.parent.parent, valid_set.name, valid_set.version)


def test_a_manifest_file_name_with_a_nul_byte_is_a_benchset_error(
    scratch_set: Path, valid_set: benchsets.Benchset
) -> None:
    manifest = manifest_of(valid_set)
    manifest["samples"][0]["tensors"][0]["file"] = "s\x00.npy"
    (scratch_set / benchsets.MANIFEST).write_text(yaml.safe_dump(manifest), encoding="utf-8")
    with pytest.raises(BenchsetError):
        benchsets.open_benchset(scratch_set.parent.parent, valid_set.name, valid_set.version)


# --- tensor files ----------------------------------------------------------------------------------


def npy_bytes(array: np.ndarray[Any, Any]) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def npz_bytes(**arrays: np.ndarray[Any, Any]) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


VALID_NPY = [
    npy_bytes(np.arange(12, dtype=np.float32).reshape(3, 4)),
    npy_bytes(np.asfortranarray(np.arange(6, dtype=">i8").reshape(2, 3))),
    npy_bytes(np.array(True)),
]
VALID_NPZ = npz_bytes(x=np.ones((2, 3), np.float16), y=np.arange(4, dtype=np.uint8))


def read_npy_bounded(data: bytes, path: Path | None = None) -> None:
    """Read ``data`` (or the file at ``path``); a returned array must fit in what was read."""
    tracemalloc.start()
    try:
        if path is None:
            array = expect_value_or(BenchsetError, lambda: tensors.load_npy_bytes(data, where="fuzz"))
        else:
            path.write_bytes(data)
            array = expect_value_or(BenchsetError, lambda: tensors.load_npy(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 4 * len(data) + (1 << 20), f"{peak} bytes allocated for a {len(data)}-byte file"
    if array is not None:
        assert array.nbytes <= len(data)
        assert tensors.is_plain_dtype(array.dtype)


@budget(200)
@given(data=st.binary(max_size=400))
def test_arbitrary_bytes_as_npy_give_an_array_or_a_benchset_error(data: bytes) -> None:
    read_npy_bounded(data)


def forged_header_length(header_length: int) -> bytes:
    """A version 2.0 ``.npy`` whose 4-byte header length claims ``header_length`` bytes (found by the fuzz profile)."""
    valid = VALID_NPY[0]
    header = valid[10:] if valid[6:8] == b"\x01\x00" else valid[12:]
    return b"\x93NUMPY\x02\x00" + header_length.to_bytes(4, "little") + header


@budget(200)
@given(data=st.sampled_from(VALID_NPY).flatmap(byte_mutations))
@example(data=forged_header_length(662_000_000))  # read(n) preallocated n bytes: 662 MB for a 176-byte file
def test_a_mutated_npy_file_gives_an_array_or_a_benchset_error(tmp_path: Path, data: bytes) -> None:
    read_npy_bounded(data, tmp_path / "t.npy")


header_fields = st.fixed_dictionaries(
    {
        "descr": st.one_of(
            st.sampled_from(["<f4", ">f8", "|b1", "<c16", "|O", "<U3", "|V8", "<M8[s]", "f4,i4", "(2,)i4", "bogus"]),
            yaml_values,
        ),
        "fortran_order": st.one_of(st.booleans(), yaml_values),
        "shape": st.one_of(
            st.lists(st.integers(min_value=-3, max_value=10**13), max_size=4).map(tuple),
            yaml_values,
        ),
    }
)


@pytest.mark.slow
@budget(200)
@given(fields=header_fields, payload=st.binary(max_size=64), version=st.sampled_from([b"\x01\x00", b"\x02\x00"]))
def test_any_npy_header_dict_is_validated_before_allocating(
    fields: dict[str, Any], payload: bytes, version: bytes
) -> None:
    text = repr(fields).encode("latin-1", errors="replace") + b"\n"
    size = struct.pack("<H", len(text)) if version == b"\x01\x00" else struct.pack("<I", len(text))
    read_npy_bounded(b"\x93NUMPY" + version + size + text + payload)


@pytest.mark.parametrize("shape", [(10**12,), (2**31, 2**31), (0, 10**18), (10**6, 10**6, 10**6)])
def test_a_huge_declared_shape_in_a_small_file_is_refused_without_allocating(
    tmp_path: Path, shape: tuple[int, ...]
) -> None:
    header = io.BytesIO()
    npy_format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": shape})
    data = header.getvalue() + bytes(8 * 25)
    tracemalloc.start()
    try:
        if math.prod(shape) == 0:
            with pytest.raises(BenchsetError, match="too long"):
                tensors.load_npy_bytes(data, where="huge")
        else:
            with pytest.raises(BenchsetError, match="truncated"):
                tensors.load_npy_bytes(data, where="huge")
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()


@budget(150)
@given(data=st.one_of(st.binary(max_size=400), byte_mutations(VALID_NPZ)))
def test_arbitrary_or_mutated_npz_bytes_give_arrays_or_a_benchset_error(data: bytes) -> None:
    arrays = expect_value_or(BenchsetError, lambda: tensors.load_npz(io.BytesIO(data), label="fuzz.npz"))
    for array in (arrays or {}).values():
        assert tensors.is_plain_dtype(array.dtype)


def forged_npz(elements: int) -> bytes:
    """A ~300-byte stored npz whose member claims (in the zip and its npy header) ``elements`` float64s."""
    header = io.BytesIO()
    npy_format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (elements,)})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("x.npy", header.getvalue() + bytes(64))
    data = bytearray(buffer.getvalue())
    claimed = len(header.getvalue()) + 8 * elements
    struct.pack_into("<I", data, 22, claimed)  # local file header: uncompressed size
    struct.pack_into("<I", data, data.index(b"PK\x01\x02") + 24, claimed)  # central directory: the same
    return bytes(data)


def test_an_npz_member_lying_about_its_size_is_refused_without_allocating_it() -> None:
    data = forged_npz(2**24)  # claims 128 MiB in a ~300-byte archive
    tracemalloc.start()
    try:
        with pytest.raises(BenchsetError, match=r"truncated|forged or corrupt"):
            tensors.load_npz(io.BytesIO(data), label="forged.npz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB allocated for a {len(data)}-byte archive"


def test_an_npy_header_cut_inside_a_bracket_is_a_benchset_error() -> None:
    text = b"{'descr': '<f4', 'fortran_order': False, 'shape': (3,\n"
    data = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text
    with pytest.raises(BenchsetError, match=r"not a valid \.npy file"):
        tensors.load_npy_bytes(data, where="cut.npy")


def corrupt_npz(how: str) -> bytes:
    """``VALID_NPZ`` broken in one named way that zipfile reports with something other than BadZipFile."""
    data = bytearray(VALID_NPZ)
    directory = data.index(b"PK\x01\x02")
    if how == "central directory offset":
        struct.pack_into("<I", data, data.rindex(b"PK\x05\x06") + 16, 0xFFFFFF00)
    elif how == "compression method":
        struct.pack_into("<H", data, 8, 99)
        struct.pack_into("<H", data, directory + 10, 99)
    elif how == "zip version":
        struct.pack_into("<H", data, directory + 6, 0x00C6)
    elif how == "deflate stream":
        start = 30 + sum(struct.unpack_from("<HH", data, 26))
        data[start : start + 6] = bytes(b ^ 0xFF for b in data[start : start + 6])
    return bytes(data)


@pytest.mark.parametrize("how", ["central directory offset", "compression method", "zip version", "deflate stream"])
def test_a_corrupt_npz_is_a_benchset_error_naming_the_file(how: str) -> None:
    with pytest.raises(BenchsetError, match=r"broken\.npz"):
        tensors.load_npz(io.BytesIO(corrupt_npz(how)), label="broken.npz")


# --- HTTP API: schemathesis from the app's own OpenAPI document --------------------------------------

API_TOKEN = "fuzz-token-3b9e"


@pytest.fixture(scope="module")
def api_scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return build_scenario(tmp_path_factory)


@pytest.fixture
def openapi_schema(api_scenario: Scenario, tmp_path: Path) -> Iterator[BaseSchema]:
    """The app over a real handle (a real store holding a pass, a fail and an error), as schemathesis sees it."""
    settings_with_token = api_scenario.settings.model_copy(
        update={"api": api_scenario.settings.api.model_copy(update={"token": API_TOKEN})}
    )
    for store in migrated_store(tmp_path):
        handle = RealDaemon(settings_with_token, store, startup_env=dict(api_scenario.passing.environment))
        for result in (api_scenario.passing, api_scenario.failing, api_scenario.no_baseline):
            handle.dispatch(result)
        yield schemathesis.openapi.from_asgi("/openapi.json", create_app(handle))


def assert_no_traceback(response: schemathesis.Response) -> None:
    for marker in ("Traceback (most recent call last)", 'File "/', "monitor/"):
        assert marker not in response.text, f"{marker!r} in a {response.status_code} response: {response.text[:300]}"


def fuzz_every_operation(
    schema: BaseSchema, examples: int, headers: dict[str, str] | None, known: dict[str, Any]
) -> list[str]:
    """Generated requests for every operation; each response is validated against the schema.

    Three kinds of case per operation: valid by the schema (mostly unknown names: 404s), invalid
    by the schema (must be rejected with a 4xx, never a 500), and valid with the path parameters
    set to things that exist (``known``), so the 200 paths are exercised too. (schemathesis' own
    pytest plugin does not run under pytest 9 yet, so hypothesis drives each operation directly.)
    """
    labels = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), f"schemathesis cannot read an operation: {result}"
        operation = result.ok()
        labels.append(operation.label)
        names = {parameter.name for parameter in operation.path_parameters}
        strategies = [operation.as_strategy()]
        if names:
            strategies.append(operation.as_strategy(path_parameters={k: known[k] for k in names}))
        if names or list(operation.query):
            strategies.append(operation.as_strategy(GenerationMode.NEGATIVE))

        @budget(examples)
        @given(case=st.one_of(strategies))
        def call(case: schemathesis.Case[Any]) -> None:
            response = case.call_and_validate(headers=headers)
            assert_no_traceback(response)

        try:
            call()
        except Exception as exc:
            raise AssertionError(f"{operation.label}: {exc}") from exc
    return labels


def known_values(scenario: Scenario) -> dict[str, Any]:
    fingerprint = str(scenario.passing.environment["fingerprint"])
    return {
        "name": "clf",
        "run_id": 2,
        "incident_id": 1,
        "baseline_id": scenario.baseline_id,
        "fingerprint": fingerprint[:12],
        "benchset": "clf-bench",
    }


@pytest.mark.slow
def test_every_api_operation_conforms_to_its_schema_without_a_token(
    openapi_schema: BaseSchema, api_scenario: Scenario
) -> None:
    labels = fuzz_every_operation(openapi_schema, 30, None, known_values(api_scenario))
    assert "POST /-/reload" in labels and "GET /metrics" in labels, labels


@pytest.mark.slow
def test_every_api_operation_conforms_to_its_schema_with_the_token(
    openapi_schema: BaseSchema, api_scenario: Scenario
) -> None:
    fuzz_every_operation(openapi_schema, 20, {"Authorization": f"Bearer {API_TOKEN}"}, known_values(api_scenario))
