"""ONNX Runtime sessions built exactly as production configures them, verified and timed.

``Session`` creates an ``InferenceSession`` from a ``ModelConfig``-style description
(providers with options, graph optimization level, threads, deterministic compute,
session config entries) and then *verifies* it: ``get_available_providers()`` lists what
was compiled in, not what works, and a CUDA provider whose libraries fail to load falls
back to CPU with only a log line. Only ``session.get_providers()`` tells the truth, so a
requested provider missing from it is reported in ``SessionInfo.fallback``.

``run()`` validates inputs against the model signature once (the public method
validates, the private one works) and enforces a timeout with ``RunOptions.terminate``.
Outputs come back as arrays: strings, sequences and maps as the companion tensors that
``nontensor.py`` names (``name``, ``name:keys``, ``name:shapes``); any other output type (an
optional, a sequence of sequences) is refused when the session is built, naming the output and its type.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.details import SessionDetails
from monitor.errors import ModelError
from monitor.files.signature import InputSpec, check_inputs_fit
from monitor.runtime import footprint, nontensor
from monitor.runtime.watchdog import Deadline

__all__ = ["Deadline", "RunTimeout", "Session", "SessionInfo", "TensorSpec", "provider_arguments", "session_options"]

_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "layout": getattr(ort.GraphOptimizationLevel, "ORT_ENABLE_LAYOUT", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}

# ONNX Runtime's tensor type strings -> numpy dtypes (inputs we can feed from numpy).
_ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}

_PLACEMENT_KEY = "session.record_ep_graph_assignment_info"
_SHRINK_KEY = "memory.enable_memory_arena_shrinkage"


class RunTimeout(Exception):
    """``Session.run`` exceeded its timeout and ONNX Runtime terminated it."""


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output: name, numpy dtype (None if not numpy-representable), shape."""

    name: str
    type: str
    shape: tuple[int | str | None, ...]

    @property
    def dtype(self) -> np.dtype[Any] | None:
        numpy_type = _ORT_TYPES.get(self.type)
        return np.dtype(numpy_type) if numpy_type is not None else None


@dataclass(frozen=True)
class SessionInfo:
    """What the session really is, as opposed to what was asked for."""

    requested: tuple[str, ...]
    effective: tuple[str, ...]
    fallback: tuple[str, ...]
    provider_options: Mapping[str, Mapping[str, str]]
    placement: Mapping[str, int] = field(default_factory=dict)
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    load_seconds: float = 0.0

    def to_dict(self) -> SessionDetails:
        return {
            "requested": list(self.requested),
            "effective": list(self.effective),
            "fallback": list(self.fallback),
            "provider_options": {k: dict(v) for k, v in self.provider_options.items()},
            "placement": dict(self.placement),
            "load_seconds": self.load_seconds,
        }


def session_options(cfg: SessionConfig, *, record_placement: bool = True) -> ort.SessionOptions:
    """``SessionOptions`` from config; ``deterministic_compute`` is the attribute, not a config key."""
    options = ort.SessionOptions()
    options.graph_optimization_level = _OPT_LEVELS[cfg.graph_optimization_level]
    options.intra_op_num_threads = cfg.intra_op_num_threads
    options.inter_op_num_threads = cfg.inter_op_num_threads
    options.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL if cfg.execution_mode == "parallel" else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    # The string key "session.use_deterministic_compute" does nothing; the attribute does.
    options.use_deterministic_compute = cfg.deterministic_compute
    options.log_severity_level = 3
    for key, value in cfg.config_entries.items():
        options.add_session_config_entry(key, value)
    if record_placement and _PLACEMENT_KEY not in cfg.config_entries:
        options.add_session_config_entry(_PLACEMENT_KEY, "1")
    return options


def provider_arguments(specs: Sequence[ProviderSpec]) -> tuple[list[str], list[dict[str, str]]]:
    """Provider names and their options as ONNX Runtime wants them (option values as strings)."""
    names = [spec.name for spec in specs]
    options = [{key: _option_text(value) for key, value in spec.options.items()} for spec in specs]
    return names, options


def _option_text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


class Session:
    """A verified ``InferenceSession``; ``info`` says which providers really run the model."""

    def __init__(
        self,
        model_path: Path,
        providers: Sequence[ProviderSpec],
        session: SessionConfig | None = None,
        *,
        optimized_model_path: Path | None = None,
    ) -> None:
        self.model_path = Path(model_path)
        cfg = session or SessionConfig()
        if not self.model_path.is_file():
            raise ModelError(f"model file {self.model_path} not found")
        options = session_options(cfg)
        if optimized_model_path is not None:
            options.optimized_model_filepath = str(optimized_model_path)
        names, provider_options = provider_arguments(providers)
        _make_cache_dirs(provider_options)
        started = time.perf_counter()
        try:
            with warnings.catch_warnings():
                # "provider not in available provider names": we report it ourselves as a fallback.
                warnings.simplefilter("ignore", UserWarning)
                self._session = ort.InferenceSession(
                    str(self.model_path), sess_options=options, providers=names, provider_options=provider_options
                )
        except Exception as exc:  # ORT raises several pybind types (InvalidProtobuf, Fail, ...)
            reason = _first_line(exc) + footprint.cap_note(exc)  # a session refused memory under the cap says so
            raise ModelError(f"model file {self.model_path} cannot be loaded by ONNX Runtime: {reason}") from None
        load_seconds = time.perf_counter() - started
        effective = tuple(self._session.get_providers())
        self.info = SessionInfo(
            requested=tuple(names),
            effective=effective,
            fallback=tuple(n for n in names if n not in effective),
            provider_options=self._session.get_provider_options(),
            placement=self._placement(),
            inputs=tuple(_spec(i) for i in self._session.get_inputs()),
            outputs=tuple(_spec(o) for o in self._session.get_outputs()),
            load_seconds=load_seconds,
        )
        for output in self.info.outputs:
            nontensor.check_output_type(output.name, output.type, str(self.model_path))
        self._output_names = _companion_names(self.info.outputs, str(self.model_path))
        self._signature = [
            InputSpec(
                spec.name,
                spec.dtype,
                tuple("?" if d is None or (isinstance(d, int) and d < 0) else d for d in spec.shape),
            )
            for spec in self.info.inputs
        ]
        self.input_casts: dict[str, str] = {}
        self.run_config = _run_config(cfg.run_config_entries, effective)

    @property
    def output_names(self) -> list[str]:
        """The compared outputs: the model's, each followed by its companions (``name:keys``, ``name:shapes``)."""
        return list(self._output_names)

    def _placement(self) -> dict[str, int]:
        """Node count per execution provider, where this ORT version can tell."""
        getter = getattr(self._session, "get_provider_graph_assignment_info", None)
        if getter is None:
            return {}
        counts: dict[str, int] = {}
        with contextlib.suppress(Exception):
            for subgraph in getter():
                counts[subgraph.ep_name] = counts.get(subgraph.ep_name, 0) + len(subgraph.get_nodes())
        return counts

    def fit_float_inputs(self, feeds: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        """``feeds`` with each float input cast to the model's float dtype where the two differ.

        Why: an fp16 build converted without ``keep_io_types`` takes float16 inputs, while the
        benchmark set holds the float32 inputs the model was validated with; production feeds
        it float16, so the replay casts exactly as a client would. Each cast is remembered in
        ``input_casts`` (input -> "float32->float16") for the check's details; integers, bools
        and strings are never cast.
        """
        fitted: dict[str, np.ndarray] | None = None
        for spec in self._signature:
            value = feeds.get(spec.name)
            if spec.dtype is None or value is None or value.dtype == spec.dtype:
                continue
            if spec.dtype.kind == "f" and value.dtype.kind == "f":
                fitted = fitted if fitted is not None else dict(feeds)
                fitted[spec.name] = value.astype(spec.dtype)
                self.input_casts[spec.name] = f"{value.dtype.name}->{spec.dtype.name}"
        return feeds if fitted is None else fitted

    def check_inputs(self, feeds: Mapping[str, np.ndarray], *, where: str = "inputs") -> None:
        """Raise ``ModelError`` naming the input and the expectation if ``feeds`` do not fit."""
        check_inputs_fit(feeds, self._signature, where=where)

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        *,
        timeout_s: float | None = None,
        guard: Deadline | None = None,
        where: str = "inputs",
    ) -> dict[str, np.ndarray]:
        """Validate ``feeds`` against the signature, then run.

        ``guard`` shares one watchdog across many runs (a whole replay); ``timeout_s`` makes
        a watchdog for this run alone. A float input of another float dtype than the model's
        is cast to it (see ``fit_float_inputs``); any other mismatch is a ``ModelError``.
        """
        feeds = self.fit_float_inputs(feeds)
        self.check_inputs(feeds, where=where)
        if guard is not None:
            return self._run(feeds, guard)
        with Deadline(timeout_s) as own:
            return self._run(feeds, own)

    def run_repeats(
        self, feeds: Mapping[str, np.ndarray], times: int, *, guard: Deadline, where: str = "inputs"
    ) -> list[dict[str, np.ndarray]]:
        """``times`` runs of the same ``feeds`` under ``guard``, validated and cast once (not per run).

        The replay's per-sample path: the feeds a repeat sees are the very arrays the first run saw.
        """
        feeds = self.fit_float_inputs(feeds)
        self.check_inputs(feeds, where=where)
        if self.run_config:
            _set_run_config(guard.run_options, self.run_config)
        fed = feeds if isinstance(feeds, dict) else dict(feeds)
        return [self._outputs(self._call(fed, guard)) for _ in range(times)]

    def prepare(self, feeds: Mapping[str, np.ndarray], *, where: str = "inputs") -> dict[str, np.ndarray]:
        """``feeds`` cast and validated as ``run`` does, for ``run_prepared``: the work done before a call starts."""
        fitted = self.fit_float_inputs(feeds)
        self.check_inputs(fitted, where=where)
        return dict(fitted)

    def configure(self, guard: Deadline) -> None:
        """Set the run config entries on ``guard``'s options, once, before threads share them (``run_prepared``)."""
        _set_run_config(guard.run_options, self.run_config)

    def run_prepared(self, feeds: dict[str, np.ndarray], *, guard: Deadline) -> dict[str, np.ndarray]:
        """Run ``prepare``'s feeds under ``guard`` (``configure``d), with nothing before the call into ONNX
        Runtime: threads released together by a barrier then overlap in ONNX Runtime itself, not in Python."""
        return self._outputs(self._call(feeds, guard))

    def _run(self, feeds: Mapping[str, np.ndarray], guard: Deadline) -> dict[str, np.ndarray]:
        _set_run_config(guard.run_options, self.run_config)
        return self._outputs(self._call(dict(feeds), guard))

    def _call(self, feeds: dict[str, np.ndarray], guard: Deadline) -> list[Any]:
        try:
            return self._session.run(None, feeds, guard.run_options)  # type: ignore[no-any-return]
        except Exception:
            if guard.fired.is_set():
                raise RunTimeout(f"inference exceeded {guard.timeout_s:g}s and was terminated") from None
            raise

    def _outputs(self, values: Sequence[Any]) -> dict[str, np.ndarray]:
        result: dict[str, np.ndarray] = {}
        for output, value in zip(self.info.outputs, values, strict=True):
            if nontensor.is_plain(output.type):
                result[output.name] = np.asarray(value)
            else:
                result.update(nontensor.flatten(output.name, output.type, value))
        return result


def _make_cache_dirs(provider_options: Sequence[Mapping[str, str]]) -> None:
    """Create the directories of ``*_cache_path`` provider options (TensorRT's engine and timing caches).

    Best effort: a cache that cannot be made costs an engine build, never the check.
    """
    for options in provider_options:
        for key, value in options.items():
            if key.endswith("_cache_path") and value:
                with contextlib.suppress(OSError):
                    Path(value).mkdir(parents=True, exist_ok=True)


def _run_config(entries: Mapping[str, str], effective: Sequence[str]) -> dict[str, str]:
    """The run config entries every run sets. The arena shrinkage list keeps ``gpu:N`` only while CUDA
    really runs the model: ORT refuses the whole run when a listed device has no arena (CUDA fell back)."""
    kept = dict(entries)
    shrink = kept.pop(_SHRINK_KEY, None)
    if shrink is not None:
        cuda = "CUDAExecutionProvider" in effective
        devices = [d for d in shrink.split(";") if d.strip() and (cuda or not d.strip().startswith("gpu:"))]
        if devices:
            kept[_SHRINK_KEY] = ";".join(devices)
    return kept


def _set_run_config(options: ort.RunOptions, entries: Mapping[str, str]) -> None:
    """Set ``entries`` on ``options`` once (setting a key again logs an "overwritten" warning per run)."""
    for key, value in entries.items():
        try:
            same = options.get_run_config_entry(key) == value
        except RuntimeError:  # not set yet
            same = False
        if not same:
            options.add_run_config_entry(key, value)


def _companion_names(outputs: Sequence[TensorSpec], model: str) -> tuple[str, ...]:
    """Every compared tensor name; ``ModelError`` when a companion collides with another output."""
    names: list[str] = []
    for output in outputs:
        for name in nontensor.companions(output.name, output.type):
            if name in names:
                raise ModelError(
                    f"model {model}: output {output.name!r} ({output.type}) needs the name {name!r},"
                    " which another output already has"
                )
            names.append(name)
    return tuple(names)


def _spec(node_arg: Any) -> TensorSpec:
    return TensorSpec(name=node_arg.name, type=node_arg.type, shape=tuple(node_arg.shape))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1][:500] if text else type(exc).__name__
