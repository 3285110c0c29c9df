"""The endpoint runner: a benchmark set replayed through a served model, over the Open Inference Protocol.

One interface, two runners (``runtime/runner.py``): the local ``Session`` and this ``EndpointRunner``
answer ``output_names`` and ``run_repeats`` alike, so the replay, comparison, history, metrics and alerts
are the same for both. The wire is ``tritonclient``'s (a well-kept client, no hand-written protocol):
REST with the binary tensor extension for inputs and outputs (no float is ever written as JSON text),
gRPC with ``raw_input_contents`` / ``raw_output_contents``.

Every failure is an ``EndpointError`` with its reason code: ``endpoint_unreachable`` (refused, no route,
no such host), ``endpoint_timeout`` (no answer within ``timeout_s``), ``endpoint_status`` (an HTTP or gRPC
error status, with the server's message), ``endpoint_dtype`` / ``endpoint_shape`` / ``endpoint_answer``
(an answer that lies about its tensors or lacks one).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from monitor import bounded
from monitor.config.endpoint_schema import EndpointConfig
from monitor.errors import EndpointError
from monitor.runtime.watchdog import Deadline
from monitor.serving import wire

Prepare = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]
_TOKEN_LIMIT = 64 * 1024
# gRPC status codes that mean "nobody answered" / "too slow"; every other one is the server's own status.
_GRPC_UNREACHABLE = {"StatusCode.UNAVAILABLE"}
_GRPC_TIMEOUT = {"StatusCode.DEADLINE_EXCEEDED"}


class EndpointRunner:
    """One served model, asked as a local session would be: ``run`` and ``run_repeats`` give named arrays."""

    def __init__(
        self,
        cfg: EndpointConfig,
        output_dtypes: Mapping[str, np.dtype[Any] | None],
        *,
        prepare: Prepare | None = None,
    ) -> None:
        self.cfg = cfg
        self._outputs = dict(output_dtypes)
        self._prepare = prepare
        self._headers = _auth_headers(cfg)
        self._nonce = secrets.token_hex(8)  # request ids never repeat across checks
        self._count = 0
        self._rest = cfg.protocol == "v2-rest"
        self._module: Any = _client_module(self._rest)
        self._client: Any = None

    @property
    def output_names(self) -> list[str]:
        return list(self._outputs)

    @property
    def where(self) -> str:
        version = f" v{self.cfg.version}" if self.cfg.version else ""
        return f"{self.cfg.protocol} {self.cfg.url} model {self.cfg.model}{version}"

    def client(self) -> Any:
        """The protocol's client, made on first use (a connection refused then is ``endpoint_unreachable``)."""
        if self._client is None:
            self._client = _guarded(self, lambda: _make_client(self._module, self.cfg, self._rest))
        return self._client

    def run(
        self, feeds: Mapping[str, np.ndarray], *, parameters: Mapping[str, Any] | None = None, where: str = "inputs"
    ) -> dict[str, np.ndarray]:
        """One request of ``feeds`` (prepared as the local session prepares them); the named outputs."""
        prepared = self._prepare(feeds) if self._prepare is not None else feeds
        return self._infer(prepared, parameters=parameters, where=where)

    def run_repeats(
        self, feeds: Mapping[str, np.ndarray], times: int, *, guard: Deadline, where: str = "inputs"
    ) -> list[dict[str, np.ndarray]]:
        """``times`` requests of the same ``feeds``; the check's deadline ends the replay between requests."""
        prepared = self._prepare(feeds) if self._prepare is not None else feeds
        answers = []
        for _ in range(times):
            if guard.fired.is_set():
                raise EndpointError("endpoint_timeout", f"the check's timeout ran out while asking {self.where}")
            answers.append(self._infer(prepared, parameters=None, where=where))
        return answers

    def _infer(
        self, feeds: Mapping[str, np.ndarray], *, parameters: Mapping[str, Any] | None, where: str
    ) -> dict[str, np.ndarray]:
        module, client = self._module, self.client()
        inputs = []
        for name, value in feeds.items():
            array = wire.as_sent(np.asarray(value))
            tensor = module.InferInput(name, list(array.shape), wire.datatype_of(array))
            tensor.set_data_from_numpy(array)  # REST: binary_data=True by default; gRPC: raw_input_contents
            inputs.append(tensor)
        outputs = [module.InferRequestedOutput(n) for n in self._outputs]  # REST: binary_data=True by default
        self._count += 1
        request: dict[str, Any] = {
            "model_name": self.cfg.model,
            "inputs": inputs,
            "model_version": self.cfg.version,
            "outputs": outputs,
            "request_id": f"onnxmon-{self._nonce}-{self._count}",
            "headers": self._headers or None,
            "parameters": dict(parameters) if parameters else None,
        }
        if not self._rest:
            request["client_timeout"] = float(self.cfg.timeout_s)
        result = _guarded(self, lambda: client.infer(**request), where=where)
        return {name: self._decode(result, name, where) for name in self._outputs}

    def _decode(self, result: Any, name: str, where: str) -> np.ndarray:
        try:
            described = result.get_output(name)
            if isinstance(described, dict):
                datatype, shape = str(described.get("datatype")), [int(d) for d in described.get("shape", [])]
            elif described is not None:
                datatype, shape = str(described.datatype), [int(d) for d in described.shape]
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # "outputs": 5, "shape": ["a"] or null
            raise EndpointError(
                "endpoint_answer", f"{self.where} answered a malformed output {name!r} ({where}): {exc}"
            ) from None
        if described is None:
            raise EndpointError("endpoint_answer", f"{self.where} answered no output {name!r} ({where})")
        return wire.received(name, datatype, shape, lambda: result.as_numpy(name), self._outputs[name])

    def server_metadata(self) -> dict[str, Any]:
        """``/v2`` (name, version, extensions) and the model's metadata (platform, versions), as JSON."""
        client, headers = self.client(), self._headers or None
        if self._rest:
            server = _guarded(self, lambda: client.get_server_metadata(headers=headers))
            model = _guarded(self, lambda: client.get_model_metadata(self.cfg.model, self.cfg.version, headers=headers))
        else:
            wait = float(self.cfg.timeout_s)  # gRPC waits without end unless told (REST: the client's timeouts)
            server = _guarded(
                self, lambda: client.get_server_metadata(headers=headers, as_json=True, client_timeout=wait)
            )
            model = _guarded(
                self,
                lambda: client.get_model_metadata(
                    self.cfg.model, self.cfg.version, headers=headers, as_json=True, client_timeout=wait
                ),
            )
        for what, found in (("server", server), ("model", model)):
            if not isinstance(found, dict):
                raise EndpointError("endpoint_answer", f"{self.where}: its {what} metadata is not a JSON object")
        return {"server": dict(server), "model": dict(model)}

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):  # a broken connection closing is no news
                client.close()


def _client_module(rest: bool) -> Any:
    try:
        if rest:
            import tritonclient.http as module
        else:
            import tritonclient.grpc as module  # type: ignore[no-redef]
    except ImportError as exc:
        raise EndpointError(
            "config_error",
            f"models[].endpoint needs tritonclient ({exc}): from the clone, .venv/bin/pip install -e '.[serving]'",
        ) from None
    return module


def _make_client(module: Any, cfg: EndpointConfig, rest: bool) -> Any:
    url, tls = cfg.url, cfg.tls
    if url.startswith("https://"):
        url, tls = url.removeprefix("https://"), True
    url = url.removeprefix("http://")
    if rest:
        timeout = float(cfg.timeout_s)
        return module.InferenceServerClient(
            url, connection_timeout=timeout, network_timeout=timeout, ssl=tls, concurrency=1
        )
    return module.InferenceServerClient(url, ssl=tls)


def _auth_headers(cfg: EndpointConfig) -> dict[str, str]:
    if cfg.token_file is None:
        return {}
    try:
        token = bounded.read_text(cfg.token_file, limit=_TOKEN_LIMIT).strip()
    except (OSError, ValueError) as exc:
        raise EndpointError("config_error", f"endpoint.token_file {cfg.token_file} cannot be read: {exc}") from None
    return {"Authorization": f"Bearer {token}"} if token else {}


def _guarded(runner: EndpointRunner, call: Callable[[], Any], *, where: str = "") -> Any:
    """``call()``, its failures turned into ``EndpointError`` with their reason code."""
    from tritonclient.utils import InferenceServerException

    at = f"{runner.where}" + (f" ({where})" if where else "")
    try:
        return _within(float(runner.cfg.timeout_s), call) if runner._rest else call()  # gRPC: client_timeout
    except EndpointError:
        raise
    except InferenceServerException as exc:
        status, message = str(exc.status() or ""), str(exc.message() or exc)
        raise EndpointError(*_classify(status, message, at, float(runner.cfg.timeout_s))) from None
    except TimeoutError as exc:
        raise EndpointError("endpoint_timeout", f"{at}: no answer within {runner.cfg.timeout_s:g}s ({exc})") from None
    except OSError as exc:  # refused, reset, no route, no such host
        raise EndpointError("endpoint_unreachable", f"{at}: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # the client could not read the answer: malformed JSON, a body cut short
        detail = f"{type(exc).__name__}: {exc}"[:500]
        raise EndpointError(
            "endpoint_answer", f"{at}: the answer is not an Open Inference Protocol one: {detail}"
        ) from None


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()`` within ``seconds`` in all: the REST client's timeouts bound each read, so an answer that
    trickles (a byte a second) would otherwise take as long as the server likes."""
    import gevent  # type: ignore[import-untyped]  # the REST client's sockets are gevent's: a gevent timeout interrupts a read in progress

    with gevent.Timeout(seconds, TimeoutError(f"the whole answer took longer than {seconds:g}s")):
        return call()


def _classify(status: str, message: str, at: str, timeout_s: float) -> tuple[str, str]:
    lowered = message.lower()
    if status in _GRPC_TIMEOUT or "timed out" in lowered or "timeout" in lowered:
        return "endpoint_timeout", f"{at}: no answer within {timeout_s:g}s ({status or message})"
    if status in _GRPC_UNREACHABLE or "connection refused" in lowered or "failed to connect" in lowered:
        return "endpoint_unreachable", f"{at}: {message}"
    shown = f"status {status}" if status else "an error"
    return "endpoint_status", f"{at} answered {shown}: {message[:500]}"


def output_dtypes(names: Sequence[str], dtypes: Mapping[str, np.dtype[Any] | None]) -> dict[str, np.dtype[Any] | None]:
    """The served outputs and the dtype each must have: the local session's, in its order."""
    return {name: dtypes.get(name) for name in names}
