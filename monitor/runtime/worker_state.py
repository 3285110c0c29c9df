"""What a check worker keeps between its checks, and nothing else.

Every check runs in a check worker (``daemon/warm_worker.py``): a daemon's kept one checks its
model again and again, ``onnxmon check``'s answers once. Between checks a worker keeps exactly:

- its ONNX Runtime session, rebuilt when the model file's digests (with its external data) or the
  session's settings (path, providers, options) differ from the ones it was built from: on a GPU a
  session is a CUDA context, cuDNN/cuBLAS handles, algorithm searches and, with TensorRT, an engine
  build, so this is the one thing kept for speed;
- the table of file digests by stat stamp (``files/stamped.py``: ``Digests``), so an unchanged
  model file is not read and hashed again (its digests, with its header's facts: opset, producer,
  external-data files);
- the environment's process-constant parts (ONNX Runtime, Python, OS: ``envsnap.capture(constant=...)``).

Everything else (the benchmark set's and the baseline's tensors and manifests, ``baseline.json``,
the rest of the environment, the comparison) is read or computed at every check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from monitor.config.settings import ModelConfig
from monitor.files import modelfile
from monitor.files.modelfile import ModelIdentity
from monitor.files.stamped import Digests
from monitor.runtime import envsnap
from monitor.runtime.gpu import Entries
from monitor.runtime.session import Session


class WorkerState:
    """One check worker's session, file digests and process-constant environment parts."""

    def __init__(self) -> None:
        self.digests = Digests()
        self.session_builds = 0
        self._constant_env: dict[str, Entries] = {}
        self._session: Session | None = None
        self._session_key: tuple[Any, ...] | None = None

    def identify(self, path: Path) -> ModelIdentity:
        """The model file's identity; its digests answered from the table while its stamp is unchanged."""
        return modelfile.identify(Path(path), self.digests)

    def session(self, model: ModelConfig, identity: ModelIdentity) -> tuple[Session, bool]:
        """A session of ``model`` whose file has ``identity``, and whether it was built now.

        The kept one when it was built from this identity and configuration; otherwise the old one
        is dropped first (never two sessions of a model in memory at once) and a new one built.
        """
        key = (
            str(model.path),
            identity.sha256,
            tuple(sorted(identity.external_data.items())),
            model.model_dump_json(include={"providers", "session"}),
        )
        if self._session is not None and self._session_key == key:
            self._session.input_casts.clear()  # a check's casts are its own (the benchset may have changed)
            return self._session, False
        self._session, self._session_key = None, None
        session = Session(model.path, model.providers, model.session)
        self._session, self._session_key = session, key
        self.session_builds += 1
        return session, True

    def capture_env(self) -> envsnap.EnvSnapshot:
        """The environment snapshot, its process-constant parts probed once per worker."""
        return envsnap.capture(constant=self._constant_env)
