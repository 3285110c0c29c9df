"""A real Open Inference Protocol server for the endpoint tests: KServe's own Python model server
(``kserve`` from PyPI) serving an ONNX model with ONNX Runtime, REST and gRPC on loopback.

Run by the interpreter that has kserve (``tests/serving_oip.py`` finds it), never imported by the
suite: ``python tests/oip_server.py MODEL.onnx --name NAME --http-port P --grpc-port Q [--variant V]``.

Variants, each a way a serving stack goes wrong (``--variant``):

- ``plain``: the model's own answers, binary on REST when asked (the binary tensor extension), raw on gRPC;
- ``round6``: answers in JSON (never binary) with every float rounded to 6 significant digits, as a
  server formatting its floats with ``%g`` does;
- ``cache``: a response cache keyed by the request's input bytes, warmed (``--warm DIR`` of ``.npz``
  inputs) by the model as it was, while the model behind it has changed (its float outputs + 1e-3): the
  replayed set is answered from the cache, anything new by the changed model;
- ``slow``: answers after ``--delay`` seconds; ``error500``: every inference fails (HTTP 500, gRPC INTERNAL);
- ``dtype``: float outputs declared and sent as FP64; ``shape``: outputs answered flattened to one axis.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

_ARGS = argparse.ArgumentParser()
_ARGS.add_argument("model")
_ARGS.add_argument("--name", required=True)
_ARGS.add_argument("--http-port", type=int, required=True)
_ARGS.add_argument("--grpc-port", type=int, required=True)
_ARGS.add_argument("--variant", default="plain")
_ARGS.add_argument("--delay", type=float, default=5.0)
_ARGS.add_argument("--warm", default="")
OPTS = _ARGS.parse_args()
sys.argv = sys.argv[:1]  # kserve parses the command line at import: give it none of ours

import onnxruntime as ort  # noqa: E402
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer  # noqa: E402
from kserve.errors import InferenceError  # noqa: E402


def _loopback_only() -> None:
    """KServe binds every interface (0.0.0.0 and [::]) with no option to choose: hold both to 127.0.0.1."""
    import grpc.aio
    import uvicorn

    config_init = uvicorn.Config.__init__

    def config(self: uvicorn.Config, *args: object, **kwargs: object) -> None:
        kwargs["host"] = "127.0.0.1"
        config_init(self, *args, **kwargs)  # type: ignore[arg-type]

    uvicorn.Config.__init__ = config  # type: ignore[method-assign]
    server_type = type(grpc.aio.server())
    add_port = server_type.add_insecure_port

    def insecure_port(self: object, address: str) -> int:
        return add_port(self, address.replace("[::]", "127.0.0.1"))  # type: ignore[arg-type]

    server_type.add_insecure_port = insecure_port  # type: ignore[method-assign]


def _key(feeds: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(feeds):
        value = np.ascontiguousarray(feeds[name])
        digest.update(f"{name}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


class OnnxModel(Model):  # type: ignore[misc]
    def __init__(self, name: str, path: str) -> None:
        super().__init__(name)
        self.session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.session.get_outputs()]
        self.cache: dict[str, dict[str, np.ndarray]] = {}
        self.load()

    def load(self) -> bool:
        if OPTS.variant == "cache" and OPTS.warm:
            for file in sorted(Path(OPTS.warm).glob("*.npz")):
                with np.load(file) as data:
                    feeds = {k: data[k] for k in data.files}
                self.cache[_key(feeds)] = self.compute(feeds)
        self.ready = True
        return True

    def compute(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.names, self.session.run(None, feeds), strict=True))

    async def predict(self, payload: InferRequest, headers: dict[str, str] | None = None) -> InferResponse:
        if OPTS.variant == "slow":
            time.sleep(OPTS.delay)
        if OPTS.variant == "error500":
            raise InferenceError("the model's backend failed (test variant error500)")
        feeds = {i.name: i.as_numpy() for i in payload.inputs}
        if OPTS.variant == "cache":
            answer = self.cache.get(_key(feeds))
            if answer is None:  # a miss: the model as it is now answers
                answer = {k: v + 1e-3 if v.dtype.kind == "f" else v for k, v in self.compute(feeds).items()}
        else:
            answer = self.compute(feeds)
        binary = payload.from_grpc or OPTS.variant != "round6"
        outputs = []
        for name in self.names:
            value = np.asarray(answer[name])
            if OPTS.variant == "dtype" and value.dtype.kind == "f":
                value = value.astype(np.float64)
            if OPTS.variant == "shape":
                value = value.reshape(-1)
            out = InferOutput(name=name, shape=list(value.shape), datatype=_datatype(value))
            if OPTS.variant == "round6" and value.dtype.kind == "f":
                out.set_data_from_numpy(
                    np.array([float(f"{v:.6g}") for v in value.reshape(-1)]).astype(value.dtype).reshape(value.shape),
                    binary_data=False,
                )
            else:
                out.set_data_from_numpy(value, binary_data=binary)
            outputs.append(out)
        return InferResponse(
            response_id=payload.id or "",
            model_name=self.name,
            infer_outputs=outputs,
            use_binary_outputs=binary,
        )


def _datatype(value: np.ndarray) -> str:
    from kserve.utils.utils import from_np_dtype

    return str(from_np_dtype(value.dtype))


if __name__ == "__main__":
    _loopback_only()
    ModelServer(http_port=OPTS.http_port, grpc_port=OPTS.grpc_port, workers=1, enable_grpc=True).start(
        [OnnxModel(OPTS.name, OPTS.model)]
    )
