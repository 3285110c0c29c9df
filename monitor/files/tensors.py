"""Safe reading and writing of tensors as ``.npy`` files, for benchmark sets and baselines.

The files we read come from disk that other people (or a fuzzer) wrote, so a reader here
never trusts them: pickles are refused (``allow_pickle`` is never on), the ``.npy`` header
is parsed and checked *before* any array memory is allocated (plain numeric/bool dtype,
expected shape, and a byte count that matches what is really there, so a header declaring
``(10**12,)`` in a 200-byte file is rejected at once), and a checksum mismatch, a truncated
file or a path that escapes its directory raises ``BenchsetError`` naming the file, what
was expected and what was found. ``.npz`` archives are opened member by member with the
same reader, so a key holding pickled objects is refused with its file and key named.

A caller that owns a different error type (baselines) passes ``error=BaselineError``.

Text: a caller that stores strings (baselines hold string outputs, ``runtime/nontensor.py``)
passes ``text=True`` and then numpy's fixed-width unicode (``<U``) is accepted as well: it is
pickle-free, has a fixed item size (so the byte-count check holds) and is validated to hold
only real code points. Benchmark sets do not pass it: their manifest names plain dtypes only.
"""

from __future__ import annotations

import hashlib
import io
import os
import tokenize
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np
import numpy.lib.format as npy_format

from monitor import bounded
from monitor.errors import BenchsetError, MonitorError

# Plain numeric and boolean kinds: bool, signed/unsigned int, float, complex.
PLAIN_KINDS = frozenset("biufc")
_CHUNK = 1 << 20


class ByteReader(Protocol):
    """What the header parser needs of a stream: sized reads and a position."""

    def read(self, size: int = -1, /) -> bytes: ...

    def tell(self) -> int: ...


def is_plain_dtype(dtype: np.dtype[Any]) -> bool:
    """True for bool/int/uint/float/complex scalars; False for objects, strings, records, datetimes."""
    return dtype.kind in PLAIN_KINDS and dtype.fields is None and dtype.subdtype is None and not dtype.hasobject


def is_text_dtype(dtype: np.dtype[Any]) -> bool:
    """True for numpy's fixed-width unicode (``<U1`` and wider), the one string dtype stored."""
    return dtype.kind == "U" and dtype.itemsize > 0 and dtype.fields is None and dtype.subdtype is None


def _storable(dtype: np.dtype[Any], text: bool) -> bool:
    return is_plain_dtype(dtype) or (text and is_text_dtype(dtype))


def open_regular(path: Path) -> IO[bytes]:
    """Open ``path`` for reading only if it is a regular file; ``OSError`` otherwise (``monitor.bounded``).

    Opened non-blocking first, so a FIFO (or a device) put where a tensor or model file belongs is
    refused at once instead of hanging the check until its hard timeout.
    """
    return bounded.open_regular(path)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a regular file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open_regular(path) as fp:
        while chunk := fp.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    """Flush a directory entry (a rename or a new file in it) to disk; a no-op where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems (and platforms) cannot fsync a directory: best effort
    finally:
        os.close(fd)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_npy(
    path: Path, array: np.ndarray[Any, Any], *, error: type[MonitorError] = BenchsetError, text: bool = False
) -> str:
    """Write ``array`` as ``.npy`` (no pickles, native byte order, C order), fsync it, and return its sha256.

    The shape is written as it is, 0-d included: a scalar input or output must read back as ``()``.
    """
    array = np.asarray(array)
    if not _storable(array.dtype, text):
        kinds = "plain numeric/bool or unicode" if text else "plain numeric/bool"
        raise error(f"cannot save {path}: dtype {array.dtype} is not a {kinds} dtype")
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    buffer = io.BytesIO()
    # C order, shape kept: np.ascontiguousarray would turn a 0-d (scalar) tensor into shape (1,).
    npy_format.write_array(buffer, np.asarray(array, order="C"), allow_pickle=False)
    data = buffer.getvalue()
    with open(path, "wb") as fp:
        fp.write(data)
        fp.flush()
        os.fsync(fp.fileno())
    return sha256_bytes(data)


def load_npy(
    path: Path,
    *,
    expect_dtype: str | np.dtype[Any] | None = None,
    expect_shape: Sequence[int] | None = None,
    expect_sha256: str | None = None,
    error: type[MonitorError] = BenchsetError,
    text: bool = False,
) -> np.ndarray[Any, Any]:
    """Read one ``.npy`` file safely; every expectation given is checked, header first."""
    try:
        fp = open_regular(path)
    except OSError as exc:
        raise error(f"tensor file {path} cannot be read: {exc.strerror}") from None
    with fp:
        size = os.fstat(fp.fileno()).st_size
        reader = _HashingReader(fp, limit=size)
        array = read_npy_stream(
            reader, size, where=str(path), expect_dtype=expect_dtype, expect_shape=expect_shape, error=error, text=text
        )
        if fp.read(1):  # the size check makes this unreachable unless the file grew meanwhile
            raise error(f"tensor file {path} has bytes after the array data")
    if expect_sha256 is not None and reader.hexdigest() != expect_sha256:
        raise error(f"tensor file {path} has sha256 {reader.hexdigest()}, expected {expect_sha256}")
    return array


def npy_shape(path: Path, *, error: type[MonitorError] = BenchsetError) -> tuple[int, ...]:
    """The shape an ``.npy`` file's header declares, reading the header only (no data, no checksum).

    For sizing work up front; the data and its sha256 are still verified when the array is loaded.
    """
    try:
        fp = open_regular(path)
    except OSError as exc:
        raise error(f"tensor file {path} cannot be read: {exc.strerror}") from None
    with fp:
        return _read_header(fp, str(path), error)[1]


def load_npy_bytes(
    data: bytes,
    *,
    where: str,
    expect_dtype: str | np.dtype[Any] | None = None,
    expect_shape: Sequence[int] | None = None,
    error: type[MonitorError] = BenchsetError,
) -> np.ndarray[Any, Any]:
    """Read ``.npy`` bytes held in memory (an npz member, a base64 blob) with the same checks."""
    stream = io.BytesIO(data)
    array = read_npy_stream(
        stream, len(data), where=where, expect_dtype=expect_dtype, expect_shape=expect_shape, error=error
    )
    if stream.tell() != len(data):
        raise error(f"{where} has {len(data) - stream.tell()} byte(s) after the array data")
    return array


def load_npz(
    source: Path | IO[bytes],
    *,
    label: str | None = None,
    error: type[MonitorError] = BenchsetError,
    text: bool = False,
) -> dict[str, np.ndarray[Any, Any]]:
    """Every array of an ``.npz`` archive (a path or an open stream) by key, each read safely."""
    path = label or f"npz file {source}"
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    try:
        archive = zipfile.ZipFile(open_regular(source) if isinstance(source, Path) else source)
    except OSError as exc:
        raise error(f"{path} cannot be read: {exc.strerror or exc}") from None
    except Exception as exc:  # zipfile raises many types on hostile input (ValueError, IndexError, ...)
        raise error(f"{path} cannot be opened as a zip archive: {exc}") from None
    with archive:
        for info in archive.infolist():
            if not info.filename or info.filename.endswith("/"):  # directories (ZipInfo.is_dir breaks on "")
                continue
            key = info.filename.removesuffix(".npy")
            where = f"{path} key {key!r}"
            if not info.filename.endswith(".npy"):
                raise error(f"{where}: member {info.filename!r} is not a .npy array")
            _check_declared_size(info, where, error)
            try:
                with archive.open(info) as member:
                    arrays[key] = read_npy_stream(member, info.file_size, where=where, error=error, text=text)
            except MonitorError:
                raise
            except Exception as exc:  # corrupt deflate data, bad extra fields, unknown compression
                raise error(f"{where} is corrupt: {type(exc).__name__}: {exc}") from None
    return arrays


# deflate cannot expand data by more than ~1032x: a member claiming more is forged
_MAX_DEFLATE_RATIO = 1032


def _check_declared_size(info: zipfile.ZipInfo, where: str, error: type[MonitorError]) -> None:
    """Refuse a member whose declared size its compressed bytes cannot possibly hold."""
    stored = info.compress_type == zipfile.ZIP_STORED
    ceiling = info.compress_size if stored else info.compress_size * _MAX_DEFLATE_RATIO + 1024
    if info.file_size > ceiling:
        raise error(
            f"{where} declares {info.file_size} byte(s) but holds {info.compress_size} compressed: forged or corrupt"
        )


def read_npy_stream(
    fp: ByteReader,
    size: int,
    *,
    where: str,
    expect_dtype: str | np.dtype[Any] | None = None,
    expect_shape: Sequence[int] | None = None,
    error: type[MonitorError] = BenchsetError,
    text: bool = False,
) -> np.ndarray[Any, Any]:
    """Parse a header from ``fp`` (``size`` bytes in all), validate it, then read exactly the data."""
    dtype, shape, fortran_order = _read_header(fp, where, error)
    if not _storable(dtype, text):
        kinds = "plain numeric/bool or unicode" if text else "plain numeric/bool"
        raise error(f"{where} holds dtype {dtype}; only {kinds} arrays are accepted (no pickled objects)")
    if expect_dtype is not None and dtype != np.dtype(expect_dtype):
        raise error(f"{where} has dtype {dtype.name}, expected {np.dtype(expect_dtype).name}")
    if expect_shape is not None and tuple(shape) != tuple(expect_shape):
        raise error(f"{where} has shape {format_shape(shape)}, expected {format_shape(expect_shape)}")
    header_bytes = fp.tell()
    expected_bytes = int(np.prod(shape, dtype=object)) * dtype.itemsize  # python ints: no overflow
    found_bytes = size - header_bytes
    if found_bytes != expected_bytes:
        state = "truncated" if found_bytes < expected_bytes else "too long"
        raise error(
            f"{where} is {state}: header declares shape {format_shape(shape)} {dtype.name}"
            f" = {expected_bytes} byte(s), file holds {found_bytes}"
        )
    # Grow with the data actually read, never allocate what a (possibly forged) header declares.
    buffer = bytearray()
    while len(buffer) < expected_bytes:
        chunk = fp.read(min(_CHUNK, expected_bytes - len(buffer)))
        if not chunk:
            raise error(f"{where} is truncated: expected {expected_bytes} data byte(s), read {len(buffer)}")
        buffer += chunk
    if dtype.kind == "U" and np.any(np.frombuffer(buffer, dtype=dtype.byteorder.replace("|", "=") + "u4") > 0x10FFFF):
        raise error(f"{where} holds {dtype} characters beyond U+10FFFF: not text")
    array = np.frombuffer(buffer, dtype=dtype)
    return array.reshape(shape, order="F" if fortran_order else "C")


def _read_header(fp: ByteReader, where: str, error: type[MonitorError]) -> tuple[np.dtype[Any], tuple[int, ...], bool]:
    try:
        version = npy_format.read_magic(fp)
        if version == (1, 0):
            shape, fortran_order, dtype = npy_format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran_order, dtype = npy_format.read_array_header_2_0(fp)
        else:
            raise error(f"{where} uses .npy format version {version}; expected 1.0 or 2.0")
    except MonitorError:
        raise
    except (ValueError, TypeError, EOFError, SyntaxError, OSError, tokenize.TokenError) as exc:
        raise error(f"{where} is not a valid .npy file: {exc}") from None
    return np.dtype(dtype), tuple(int(d) for d in shape), bool(fortran_order)


def format_shape(shape: Sequence[int | str]) -> str:
    """``(1,3,224,224)``: the compact form used in every message."""
    inner = ",".join(str(d) for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def resolve_inside(root: Path, relative: str, *, what: str, error: type[MonitorError] = BenchsetError) -> Path:
    """``root / relative``, refusing absolute paths, ``..`` and symlinks that lead outside ``root``."""
    candidate = Path(relative)
    if (
        not relative
        or "\x00" in relative
        or candidate.is_absolute()
        or relative.startswith(("/", "\\"))
        or ".." in candidate.parts
    ):
        raise error(f"{what}: path {relative!r} must be relative and stay inside {root}")
    base = root.resolve()
    resolved = (base / candidate).resolve()
    if not resolved.is_relative_to(base):
        raise error(f"{what}: path {relative!r} leads to {resolved}, outside {base} (symlink?)")
    return resolved


class _HashingReader(io.RawIOBase):
    """A read-only stream that hashes every byte read through it and counts its position.

    Reads are capped at the bytes the file still holds (``limit``): a buffered ``read(n)``
    allocates ``n`` bytes before reading, so a forged 4 GiB header length in a 176-byte ``.npy``
    would otherwise cost 4 GiB of memory before numpy even notices the EOF.
    """

    def __init__(self, fp: IO[bytes], limit: int | None = None) -> None:
        super().__init__()
        self._fp = fp
        self._digest = hashlib.sha256()
        self._limit = limit
        self.position = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1, /) -> bytes:
        want = -1 if size is None or size < 0 else size
        if self._limit is not None:
            left = max(self._limit - self.position, 0)
            want = left if want < 0 else min(want, left)
        data = self._fp.read(want)
        self._digest.update(data)
        self.position += len(data)
        return data

    def tell(self) -> int:
        return self.position

    def hexdigest(self) -> str:
        return self._digest.hexdigest()
