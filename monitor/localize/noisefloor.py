"""A running reference's noise floor, measured once per reference and kept while its files are unchanged.

A reference that runs (``unoptimized``, ``model``: CPU, graph optimizations disabled) used to be
run twice on every fetch, so that each tensor's spread between the two runs (its noise floor, and
the evidence of a nondeterministic reference) was known: half of a localization's inference went
to measuring a floor that is the same every time for the same reference and input. ``KeptNoise``
measures it as ``Repeated`` does (the same tensors exposed, two runs of one session) the first
time, keeps each tensor's spread under the reference's *key*, and on a later fetch whose tensors
all have a kept spread runs the reference once and uses the kept floor.

The key is what the floor depends on: the stat stamps (``files/stamped.py``: size, mtime, ctime,
inode, device) of the reference model file and of its external data files, the input's bytes
(names, dtypes, shapes, a SHA-256 of the data), and the reference's providers and session
settings. A file rewritten in place, another sample or another setting is another key, measured
afresh. What a stamp cannot see (a rewrite that restores mtime and ctime) is the stamp rule's
known limit, as for a warm check worker. Kept in this process only (a daemon's worker, a library
caller localizing again; each ``onnxmon localize`` runs in a fresh child and measures once), at
most ``KEPT_REFERENCES`` keys, the least recently used dropped first.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.files import stamped
from monitor.localize.rule import spread
from monitor.localize.search import Repeated, TensorSource

KEPT_REFERENCES = 32
Key = tuple[object, ...]
_kept: OrderedDict[Key, dict[str, float]] = OrderedDict()


def reference_key(
    path: Path,
    data_files: Sequence[Path],
    feeds: Mapping[str, np.ndarray],
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
) -> Key | None:
    """What the reference's floor depends on; None when a file cannot be stamped (nothing is kept then).

    ``data_files`` are the model's external data files (``graph.load_model_and_data_files``).
    """
    stamp = stamped.stamp([f.resolve() for f in (Path(path), *data_files)])
    if stamp is None:
        return None
    digest = hashlib.sha256()
    for name in sorted(feeds):
        value = np.ascontiguousarray(feeds[name])
        digest.update(f"{name}\0{value.dtype.str}\0{value.shape}\0".encode())
        digest.update(value.tobytes() if value.dtype.kind != "O" else repr(value.tolist()).encode())
    settings = (tuple(p.model_dump_json() for p in providers), session.model_dump_json())
    return (stamp, digest.hexdigest(), settings)


def forget() -> None:
    """Drop every kept floor (tests; a caller that wants every reference measured afresh)."""
    _kept.clear()


class KeptNoise(Repeated):
    """A reference source run twice per fetch until its floor is kept, once per fetch afterwards.

    ``noise`` holds each fetched tensor's spread, measured now or kept from an earlier
    localization of the same reference on the same input (``key``); ``key=None`` keeps nothing
    and behaves as ``search.Repeated``.
    """

    def __init__(self, source: TensorSource, key: Key | None) -> None:
        super().__init__(source)
        self._key = key
        self.kept_fetches = 0  # fetches answered with a kept floor (one run instead of two)

    def fetch(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        wanted = list(names)
        kept = _kept.get(self._key) if self._key is not None else None
        first = self._source.fetch(wanted)
        if kept is not None and all(name in kept for name in first):
            _kept.move_to_end(self._key)  # type: ignore[arg-type]  # kept is not None only with a key
            self.noise.update({name: kept[name] for name in first})
            self.kept_fetches += 1
            return first
        second = self._source.fetch(wanted)
        measured = {name: spread(value, second[name]) for name, value in first.items() if name in second}
        self.noise.update(measured)
        if self._key is not None:
            _kept.setdefault(self._key, {}).update(measured)
            _kept.move_to_end(self._key)
            while len(_kept) > KEPT_REFERENCES:
                _kept.popitem(last=False)
        return first
