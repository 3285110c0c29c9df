"""A running reference's noise floor, measured only where it matters, and kept while its files are unchanged.

A reference that runs (``unoptimized``, ``model``: CPU, graph optimizations disabled) has a noise
floor: each tensor's spread between two runs of the same exposure (and the evidence of a
nondeterministic reference). It is the same every time for the same reference and input, and
decides nothing for a tensor equal to the subject's to the bit. ``KeptNoise`` measures it as
``Repeated`` does (a second run of the same exposure, only for a chunk with a tensor that differs
from the subject), keeps each tensor's spread under the reference's *key*, and on a later fetch
uses the kept floor instead of running the reference again.

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
from monitor.localize.sources import Repeated, TensorSource

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
    """A reference source whose floor is measured where it matters and kept for the next localization.

    As ``sources.Repeated``: one run per fetch, a second run of the same chunk only when a tensor
    of it differs from the subject and has no floor yet. A floor kept from an earlier
    localization of the same reference on the same input (``key``) answers without that second
    run. ``key=None`` keeps nothing and behaves as ``sources.Repeated``.
    """

    def __init__(self, source: TensorSource, key: Key | None) -> None:
        super().__init__(source)
        self._key = key

    def fetch(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        first = super().fetch(names)
        kept = _kept.get(self._key) if self._key is not None else None
        if kept is not None:
            _kept.move_to_end(self._key)  # type: ignore[arg-type]  # kept is not None only with a key
            self.noise.update({name: kept[name] for name in first if name in kept})
        return first

    def _record(self, first: Mapping[str, np.ndarray], second: Mapping[str, np.ndarray]) -> None:
        super()._record(first, second)
        if self._key is not None:
            _kept.setdefault(self._key, {}).update({name: self.noise[name] for name in first if name in second})
            _kept.move_to_end(self._key)
            while len(_kept) > KEPT_REFERENCES:
                _kept.popitem(last=False)
