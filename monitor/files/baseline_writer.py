"""Write a baseline one sample at a time, atomically: memory bounded by one sample.

``BaselineWriter`` creates the temporary directory that becomes the baseline, writes (and
fsyncs) each sample's outputs into it as soon as they exist, keeps the sha256 of every file and
the outputs digest as it goes, and on ``commit`` writes ``baseline.json`` and renames the
directory into place. Until then nothing is visible under the model's folder but a hidden
``.tmp-*`` directory, which any failure removes (``abort``; the writer is a context manager).

The outputs digest that ``new_id`` shortens is unchanged by streaming: sha256 over the hex
sha256 of every output file in sample order, then output order, exactly as when all samples
were written at once, so existing ids keep their meaning.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from monitor.errors import BaselineError
from monitor.files import tensors
from monitor.files.baseline_meta import BaselineMeta
from monitor.files.baselines import META_FILE, Baseline, escape, new_id, output_file, write_json


class BaselineWriter:
    """A baseline under construction for ``model`` below ``root``; ``commit`` makes it one."""

    def __init__(self, root: Path, model: str) -> None:
        self.model = model
        self.model_dir = Path(root) / model
        self.temp = self.model_dir / f".tmp-{os.getpid()}-{os.urandom(4).hex()}"
        self.started = False  # the directories are made by the first write, not before
        self.files: dict[str, str] = {}
        self.digest = hashlib.sha256()
        self.names: list[str] | None = None
        self.dtypes: dict[str, str] = {}
        self.samples = 0
        self.intermediates: dict[str, str] = {}

    def add_sample(self, outputs: Mapping[str, np.ndarray]) -> None:
        """Write the next sample's outputs; the output set must be the same in every sample."""
        names = list(outputs)
        if self.names is None:
            self.names = names
            self.dtypes = {name: str(np.asarray(outputs[name]).dtype) for name in names}
        elif names != self.names:
            raise BaselineError(f"baseline for {self.model!r}: sample {self.samples} outputs {names} != {self.names}")
        index, self.samples = self.samples, self.samples + 1
        with self._writing():
            self._start()
            for k, name in enumerate(names):
                rel = output_file(index, k)
                self.files[rel] = tensors.save_npy(
                    self.temp / rel, np.asarray(outputs[name]), error=BaselineError, text=True
                )
                self.digest.update(self.files[rel].encode())

    def add_intermediates(self, sample: int, named: Mapping[str, np.ndarray]) -> None:
        """Store every intermediate tensor of ``sample`` (compressed npz), for localization."""
        rel = f"intermediates/s{sample:04d}.npz"
        with self._writing():
            self._start()
            (self.temp / "intermediates").mkdir(exist_ok=True)
            arrays: dict[str, Any] = {escape(k): np.asarray(v) for k, v in named.items()}
            np.savez_compressed(self.temp / rel, **arrays)
            self.files[rel] = tensors.sha256_file(self.temp / rel)
        self.intermediates[str(sample)] = rel

    def add_document(self, rel: str, data: Mapping[str, Any]) -> None:
        """Store a JSON document beside the outputs (e.g. ``MODEL_MANIFEST``), checksummed like them."""
        with self._writing():
            self._start()
            write_json(self.temp / rel, data)
            self.files[rel] = tensors.sha256_file(self.temp / rel)

    def commit(self, meta: BaselineMeta) -> Baseline:
        """Write ``baseline.json`` and rename the directory into place; ``meta.id`` may be empty (then generated)."""
        if self.names is None:
            self.abort()
            raise BaselineError(f"baseline for {meta.model!r}: no samples to store")
        baseline_id = meta.id or new_id(meta.model, self.digest.hexdigest())
        outputs = {name: {"index": k, "dtype": self.dtypes[name]} for k, name in enumerate(self.names)}
        inter_meta: dict[str, Any] = {}
        if self.intermediates:
            inter_meta = {"samples": sorted(int(k) for k in self.intermediates), "files": dict(self.intermediates)}
        changes = {
            "id": baseline_id,
            "sample_count": self.samples,
            "outputs": outputs,
            "files": dict(self.files),
            "intermediates": inter_meta,
        }
        final_meta = BaselineMeta(**(meta.to_dict() | changes))
        final = self.model_dir / baseline_id
        with self._writing():
            write_json(self.temp / META_FILE, final_meta.to_dict())
            tensors.fsync_dir(self.temp)
            if final.exists():
                raise BaselineError(f"baseline {baseline_id} already exists at {final}")
            self.temp.rename(final)
            tensors.fsync_dir(self.model_dir)
        return Baseline(final_meta, final)

    def abort(self) -> None:
        """Remove everything written so far; nothing half-written stays behind."""
        shutil.rmtree(self.temp, ignore_errors=True)

    def __enter__(self) -> BaselineWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self.abort()

    def _start(self) -> None:
        if not self.started:
            self.model_dir.mkdir(parents=True, exist_ok=True)
            self.temp.mkdir()
            (self.temp / "outputs").mkdir()
            self.started = True

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A failure inside removes the temp dir; an ``OSError`` (a full disk) becomes a ``BaselineError``."""
        try:
            yield
        except OSError as exc:
            self.abort()
            raise BaselineError(
                f"cannot write a baseline for {self.model!r} under {self.model_dir}: {exc.strerror or exc}"
            ) from exc
        except BaseException:
            self.abort()
            raise
