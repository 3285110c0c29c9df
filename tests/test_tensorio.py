"""The safe ``.npy`` reader: round trips, and every way a hostile file is refused before it costs memory."""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

import numpy as np
import numpy.lib.format as npy_format
import pytest

from monitor.errors import BaselineError, BenchsetError
from monitor.files.tensors import load_npy, load_npy_bytes, load_npz, resolve_inside, save_npy, sha256_file

DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool", "complex64"]


def _npy_with_header(path: Path, header: dict[str, object], payload: bytes) -> Path:
    buffer = io.BytesIO()
    npy_format.write_array_header_1_0(buffer, header)
    path.write_bytes(buffer.getvalue() + payload)
    return path


@pytest.mark.parametrize("dtype", DTYPES)
def test_saved_arrays_read_back_identical_with_the_returned_checksum(tmp_path: Path, dtype: str) -> None:
    array = (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)
    sha = save_npy(tmp_path / "a.npy", array)
    assert sha == sha256_file(tmp_path / "a.npy")
    loaded = load_npy(tmp_path / "a.npy", expect_dtype=dtype, expect_shape=(2, 3, 4), expect_sha256=sha)
    assert loaded.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(loaded, array)
    loaded[0, 0, 0] = 1  # the returned array is an ordinary writable array


def test_scalars_and_empty_arrays_round_trip_with_their_exact_shape(tmp_path: Path) -> None:
    # A 0-d tensor (silero-vad's ``sr`` input) once came back as shape (1,); assert_array_equal broadcasts
    # and would not notice, so the shape is compared on its own.
    cases = (("scalar", np.float32(3.5)), ("int-scalar", np.int64(16000)), ("empty", np.zeros((0, 4), np.int32)))
    for name, array in cases:
        sha = save_npy(tmp_path / f"{name}.npy", np.asarray(array))
        loaded = load_npy(tmp_path / f"{name}.npy", expect_shape=np.shape(array), expect_sha256=sha)
        assert loaded.shape == np.shape(array)
        np.testing.assert_array_equal(loaded, array)


def test_a_0d_npz_member_keeps_its_shape(tmp_path: Path) -> None:
    np.savez(tmp_path / "s.npz", sr=np.int64(16000), x=np.zeros((2, 3), np.float32))
    arrays = load_npz(tmp_path / "s.npz")
    assert arrays["sr"].shape == () and int(arrays["sr"]) == 16000


def test_big_endian_arrays_are_saved_in_native_order_with_the_same_values(tmp_path: Path) -> None:
    array = np.arange(5, dtype=">f4")
    save_npy(tmp_path / "be.npy", array)
    loaded = load_npy(tmp_path / "be.npy", expect_dtype="float32")
    assert loaded.dtype.isnative
    np.testing.assert_array_equal(loaded, array)


def test_fortran_ordered_files_written_by_numpy_read_correctly(tmp_path: Path) -> None:
    array = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    np.save(tmp_path / "f.npy", array)
    np.testing.assert_array_equal(load_npy(tmp_path / "f.npy"), array)


def test_a_pickled_object_array_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(BenchsetError, match=r"obj\.npy holds dtype object"):
        load_npy(tmp_path / "obj.npy")


@pytest.mark.parametrize(
    ("descr", "why"),
    [("|O", "dtype object"), ("<U4", "dtype <U4"), ([("a", "<f4")], "dtype"), ("<M8[s]", "dtype datetime64")],
)
def test_headers_with_non_numeric_dtypes_are_refused(tmp_path: Path, descr: object, why: str) -> None:
    path = _npy_with_header(tmp_path / "x.npy", {"descr": descr, "fortran_order": False, "shape": (1,)}, b"\0" * 16)
    with pytest.raises(BenchsetError, match=why):
        load_npy(path)


def test_a_huge_declared_shape_in_a_tiny_file_is_rejected_without_allocating(tmp_path: Path) -> None:
    header = {"descr": "<f4", "fortran_order": False, "shape": (10**12,)}
    path = _npy_with_header(tmp_path / "huge.npy", header, b"\0" * 72)
    assert path.stat().st_size == 200
    tracemalloc.start()
    try:
        with pytest.raises(BenchsetError, match=r"huge\.npy is truncated: .* 4000000000000 byte\(s\), file holds 72"):
            load_npy(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_a_truncated_file_names_the_file_the_expected_and_the_found_size(tmp_path: Path) -> None:
    save_npy(tmp_path / "t.npy", np.ones((4, 4), np.float32))
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[:-10])
    with pytest.raises(BenchsetError, match=r"t\.npy is truncated: .*\(4,4\) float32 = 64 byte\(s\), file holds 54"):
        load_npy(tmp_path / "t.npy")


def test_trailing_bytes_are_refused(tmp_path: Path) -> None:
    save_npy(tmp_path / "t.npy", np.ones(3, np.int8))
    with open(tmp_path / "t.npy", "ab") as fp:
        fp.write(b"junk")
    with pytest.raises(BenchsetError, match="too long"):
        load_npy(tmp_path / "t.npy")


@pytest.mark.parametrize("content", [b"", b"not an npy file at all", b"\x93NUMPY\x01\x00\xff\xff{bad"])
def test_garbage_is_reported_as_not_a_valid_npy_file(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "g.npy").write_bytes(content)
    with pytest.raises(BenchsetError, match=r"g\.npy is not a valid \.npy file"):
        load_npy(tmp_path / "g.npy")


@pytest.mark.parametrize(
    ("expectation", "message"),
    [
        ({"expect_dtype": "float16"}, "has dtype float32, expected float16"),
        ({"expect_shape": (2, 3)}, r"has shape \(3,2\), expected \(2,3\)"),
        ({"expect_sha256": "0" * 64}, "has sha256 [0-9a-f]{64}, expected 0{64}"),
    ],
)
def test_each_unmet_expectation_says_what_was_expected_and_found(
    tmp_path: Path, expectation: dict[str, object], message: str
) -> None:
    save_npy(tmp_path / "e.npy", np.zeros((3, 2), np.float32))
    with pytest.raises(BenchsetError, match=message):
        load_npy(tmp_path / "e.npy", **expectation)  # type: ignore[arg-type]


def test_the_caller_chooses_the_error_type(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="cannot be read"):
        load_npy(tmp_path / "missing.npy", error=BaselineError)


def test_in_memory_npy_bytes_get_the_same_checks() -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.arange(3, dtype=np.int16))
    np.testing.assert_array_equal(load_npy_bytes(buffer.getvalue(), where="blob"), [0, 1, 2])
    with pytest.raises(BenchsetError, match="blob is truncated"):
        load_npy_bytes(buffer.getvalue()[:-1], where="blob")


def test_npz_members_are_read_by_key_and_a_pickled_key_is_named(tmp_path: Path) -> None:
    np.savez(tmp_path / "ok.npz", a=np.ones(2, np.float32), b=np.arange(3))
    assert sorted(load_npz(tmp_path / "ok.npz")) == ["a", "b"]
    np.savez(tmp_path / "bad.npz", a=np.ones(2), evil=np.array([object()], dtype=object))
    with pytest.raises(BenchsetError, match=r"bad\.npz key 'evil' holds dtype object"):
        load_npz(tmp_path / "bad.npz")


@pytest.mark.parametrize("relative", ["../x.npy", "a/../../x.npy", "/etc/passwd", ""])
def test_paths_that_leave_the_root_are_refused(tmp_path: Path, relative: str) -> None:
    with pytest.raises(BenchsetError, match="must be relative and stay inside"):
        resolve_inside(tmp_path, relative, what="manifest")


def test_a_symlink_leading_out_of_the_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "outside.npy").write_bytes(b"")
    (tmp_path / "root" / "link.npy").symlink_to(tmp_path / "outside.npy")
    with pytest.raises(BenchsetError, match="outside"):
        resolve_inside(tmp_path / "root", "link.npy", what="manifest")
    assert resolve_inside(tmp_path / "root", "inner/x.npy", what="m") == (tmp_path / "root" / "inner/x.npy").resolve()
