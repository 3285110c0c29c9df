"""Where a check gets its model's identity and session: built fresh each time, or kept between checks.

A fresh check hashes the model file (sha256 + md5, and every external-data file) and builds a new
``InferenceSession``: on a GPU that is a CUDA context, cuDNN/cuBLAS handles, algorithm searches and,
with TensorRT, an engine build. A warm check worker (``monitor/daemon/warm.py``) keeps both instead,
in ``KeptModels``, and re-verifies the file cheaply before every check:

- the *stamp* of the model file and of each external-data file it references (size, mtime, ctime,
  inode, device; ``os.stat``, no read): any difference, and the file is hashed again;
- a full hash anyway every ``rehash_every`` checks, for what a stamp cannot see (a file system with
  coarse timestamps, a write that restored the mtime: the ctime still moves, but be sure);
- the session is rebuilt whenever the identity it was built from (the hashes) or the session's
  configuration (path, providers, options) differ from the ones asked for.

The benchmark set's and the baseline's tensor files follow the same rule (``files/stamped.py``,
``KeptModels.files``): their manifests are read at every check (a promoted baseline or a new set
version is seen at once), their arrays are kept decoded and verified while their stamps are
unchanged, and everything is read and hashed again every ``rehash_every`` checks. The parts of the
environment snapshot that cannot change in a running process are kept too (``KeptModels.capture_env``).
``kept`` is what the layers above keep between a source's checks: the last comparison
(``compare/memo.py``), matched against the outputs by their bits; a ``FreshModels``' dies with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from monitor.config.settings import ModelConfig
from monitor.files import modelfile
from monitor.files.modelfile import ModelIdentity
from monitor.files.stamped import DEFAULT_BUDGET_BYTES, FreshFiles, KeptFiles, Stamp, TensorFiles, stamp
from monitor.runtime import envsnap, envwarm
from monitor.runtime.gpu import Entries
from monitor.runtime.session import Session


class ModelSource(Protocol):
    """What ``check.py`` asks for a model: its identity (the hashes), then a session built from it.

    ``files`` reads the benchmark set's and the baseline's tensors; ``capture_env`` the environment.
    """

    files: TensorFiles
    kept: dict[str, object]  # what the layers above keep between this source's checks (compare/memo.py)

    def capture_env(self) -> envsnap.EnvSnapshot: ...

    def identify(self, path: Path) -> ModelIdentity: ...

    def session(self, model: ModelConfig, identity: ModelIdentity) -> tuple[Session, bool]:
        """A session of ``model`` whose file has ``identity``, and whether it was reused (not built now)."""
        ...

    def note(self) -> dict[str, Any] | None:
        """What this source did for the last check (for the check's details), or None to say nothing."""
        ...


class FreshModels:
    """Today's fresh check: hash the file, build a new session, read every file, every time."""

    def __init__(self) -> None:
        self.files: TensorFiles = FreshFiles()
        self.kept: dict[str, object] = {}

    def capture_env(self) -> envsnap.EnvSnapshot:
        return envsnap.capture()

    def identify(self, path: Path) -> ModelIdentity:
        return modelfile.identify(path)

    def session(self, model: ModelConfig, identity: ModelIdentity) -> tuple[Session, bool]:
        return Session(model.path, model.providers, model.session), False

    def note(self) -> dict[str, Any] | None:
        return None


@dataclass
class _Kept:
    path: Path
    stamp: Stamp
    identity: ModelIdentity
    checks_since_hash: int = 0


class KeptModels:
    """A model's identity and session kept between the checks of one warm worker.

    One worker checks one model, so one identity and one session are kept (the latest); asking for
    another file or configuration replaces them (the old session is dropped before the new one is
    built, so two never occupy the memory at once).
    """

    def __init__(
        self, *, rehash_every: int = 100, budget_bytes: int = DEFAULT_BUDGET_BYTES, files: KeptFiles | None = None
    ) -> None:
        self.rehash_every = max(1, rehash_every)
        self.kept_files = files or KeptFiles(rehash_every=self.rehash_every, budget_bytes=budget_bytes)
        self.files: TensorFiles = self.kept_files
        self.kept: dict[str, object] = {}
        self._static_env: dict[str, Entries] = {}
        self._probes = envwarm.WarmProbes(refresh_every=self.rehash_every)
        self._file: _Kept | None = None
        self._session: Session | None = None
        self._session_key: tuple[Any, ...] | None = None
        self._last: dict[str, Any] = {}

    def identify(self, path: Path) -> ModelIdentity:
        """The file's identity: kept when its stamp is unchanged and a full hash is not due, else hashed."""
        path = Path(path)
        kept = self._file
        if kept is not None and kept.path == path and kept.checks_since_hash + 1 < self.rehash_every:
            now = _stamp(path, kept.identity)
            if now is not None and now == kept.stamp:
                kept.checks_since_hash += 1
                self._last = {"model_hashed": False}
                return kept.identity
        self._file = None
        before = _stamp(path, None)
        identity = modelfile.identify(path)  # ModelError when missing or unreadable: the check's verdict
        after = _stamp(path, identity)
        # A file that changed while it was hashed is not kept: the next check hashes it again.
        if before is not None and after is not None and before[0] == after[0]:
            self._file = _Kept(path, after, identity)
        self._last = {"model_hashed": True}
        return identity

    def session(self, model: ModelConfig, identity: ModelIdentity) -> tuple[Session, bool]:
        """The kept session when it was built from this identity and configuration, else a new one."""
        key = (
            str(model.path),
            identity.sha256,
            tuple(sorted(identity.external_data.items())),
            model.model_dump_json(include={"providers", "session"}),
        )
        if self._session is not None and self._session_key == key:
            self._session.input_casts.clear()  # a check's casts are its own (the benchset may have changed)
            self._last["session_reused"] = True
            return self._session, True
        self._session = None  # drop the old one first: never two sessions of a model in memory
        self._session_key = None
        session = Session(model.path, model.providers, model.session)
        self._probes.session_built()  # the libraries it maps are read again at the next snapshot
        self._session, self._session_key = session, key
        self._last["session_reused"] = False
        return session, False

    def capture_env(self) -> envsnap.EnvSnapshot:
        """The snapshot, its process-constant parts (ONNX Runtime, Python, OS) probed once per worker,
        the rest as often as it can change under a running process (``runtime/envwarm.py``)."""
        return envsnap.capture(kept=self._static_env, probes=self._probes)

    def note(self) -> dict[str, Any] | None:
        return {**self._last, **self.kept_files.note()}


def _stamp(path: Path, identity: ModelIdentity | None) -> Stamp | None:
    """``os.stat`` facts of the model file and of its external-data files; None when one is missing."""
    return stamp([path] + [(path.parent / location) for location in sorted(identity.external_data if identity else ())])
