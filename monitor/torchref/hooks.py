"""One PyTorch forward pass, watched: what the module consumed, what it returned, what each layer made.

A forward pre-hook on the model records the tensors its ``forward`` really received (after the
factory file's ``make_inputs``, if any): the input check compares those with the benchmark set's.
With ``layers=True`` a forward hook on every submodule records its output (the first tensor of a
tuple or dict) as a numpy copy taken at once, before an in-place op downstream can change it, and
which module produced the call's first input (how a BatchNorm finds the Conv it was folded into).

The PyTorch "fast path" of ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention`` (one fused
kernel in eval mode, no submodule is called) is switched off during the pass: the exporters trace
the ordinary path, which is therefore the reference, and its submodules then report their outputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from monitor.errors import MonitorError
from monitor.torchref.factory import Factory, import_torch
from monitor.torchref.naming import ModuleCall


@dataclass
class Pass:
    """What one forward pass consumed and produced."""

    outputs: list[np.ndarray]
    consumed: dict[str, np.ndarray]  # ONNX input name -> what the module's forward received
    activations: dict[str, np.ndarray] = field(default_factory=dict)  # module -> its output
    calls: list[ModuleCall] = field(default_factory=list)


def forward(factory: Factory, feeds: Mapping[str, np.ndarray], input_names: Sequence[str], *, layers: bool) -> Pass:
    """Call the factory's module on one benchmark sample (through ``make_inputs`` when the file has one)."""
    torch = import_torch()
    args, kwargs = _arguments(torch, factory, feeds, input_names)
    consumed: dict[str, np.ndarray] = {}
    activations: dict[str, np.ndarray] = {}
    calls: list[ModuleCall] = []
    producers: dict[int, str] = {}
    keep: list[Any] = []  # tensors stay alive during the pass, so their id() cannot be reused

    def on_inputs(module: Any, hook_args: tuple[Any, ...], hook_kwargs: dict[str, Any]) -> None:
        for name, value in zip(input_names, hook_args, strict=False):
            if isinstance(value, torch.Tensor):
                consumed[name] = _numpy(value)
        for name, value in hook_kwargs.items():
            if name in input_names and isinstance(value, torch.Tensor):
                consumed[name] = _numpy(value)

    def on_output(qualified: str) -> Any:
        def hook(module: Any, hook_args: tuple[Any, ...], output: Any) -> None:
            first_input = next((a for a in hook_args if isinstance(a, torch.Tensor)), None)
            source = producers.get(id(first_input)) if first_input is not None else None
            calls.append(ModuleCall(qualified, f"{type(module).__module__}.{type(module).__qualname__}", source))
            tensor = _first_tensor(torch, output)
            if tensor is not None:
                keep.append(tensor)
                producers[id(tensor)] = qualified
                activations.setdefault(qualified, _numpy(tensor))

        return hook

    module = factory.module
    handles = [module.register_forward_pre_hook(on_inputs, with_kwargs=True)]
    if layers:
        handles += [sub.register_forward_hook(on_output(name)) for name, sub in module.named_modules()]
    try:
        with torch.no_grad(), _no_fast_path(torch):
            result = module(*args, **kwargs)
    except MonitorError:
        raise
    except (Exception, SystemExit) as exc:
        raise MonitorError(
            f"--factory {factory.spec!r}: the module's forward raised {type(exc).__name__}: {exc}"
        ) from None
    finally:
        for handle in handles:
            handle.remove()
    outputs = [_numpy(t) for t in _flatten(torch, result)]
    return Pass(outputs=outputs, consumed=consumed, activations=activations, calls=calls)


def _arguments(
    torch: Any, factory: Factory, feeds: Mapping[str, np.ndarray], input_names: Sequence[str]
) -> tuple[list[Any], dict[str, Any]]:
    if factory.make_inputs is None:
        return [torch.from_numpy(np.array(feeds[name], copy=True)) for name in input_names], {}
    try:
        made = factory.make_inputs({name: np.array(feeds[name], copy=True) for name in input_names})
    except (Exception, SystemExit) as exc:
        raise MonitorError(f"--factory {factory.spec!r}: make_inputs raised {type(exc).__name__}: {exc}") from None

    def tensor(value: Any) -> Any:
        return torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value

    if isinstance(made, dict):
        return [], {str(k): tensor(v) for k, v in made.items()}
    if isinstance(made, list | tuple):
        return [tensor(v) for v in made], {}
    if isinstance(made, torch.Tensor | np.ndarray):
        return [tensor(made)], {}
    raise MonitorError(
        f"--factory {factory.spec!r}: make_inputs returned {type(made).__name__}; expected a tensor, a tuple or list"
        " of positional arguments, or a dict of keyword arguments"
    )


def _first_tensor(torch: Any, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, list | tuple):
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    if isinstance(value, dict):
        return next((v for v in value.values() if isinstance(v, torch.Tensor)), None)
    return None


def _flatten(torch: Any, value: Any) -> Iterator[Any]:
    """The tensors of a forward's result in order: a tensor, nested tuples/lists, dict values."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _flatten(torch, item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _flatten(torch, item)


def _numpy(tensor: Any) -> np.ndarray:
    # bfloat16 has no numpy dtype: compare it in float32.
    value = tensor.detach().cpu()
    if str(value.dtype) == "torch.bfloat16":
        value = value.float()
    return np.array(value.numpy(), copy=True)


@contextlib.contextmanager
def _no_fast_path(torch: Any) -> Iterator[None]:
    mha = getattr(getattr(torch, "backends", None), "mha", None)
    if mha is None or not hasattr(mha, "set_fastpath_enabled"):
        yield
        return
    before = mha.get_fastpath_enabled()
    mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        mha.set_fastpath_enabled(before)
