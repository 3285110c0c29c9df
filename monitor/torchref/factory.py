"""The user's PyTorch model: ``path/to/file.py:make_model`` loaded, called and checked.

The factory is a function in a Python file that returns the ``nn.Module`` the ONNX model was
exported from, in ``eval()`` mode. The file is imported as a script would be (its directory first
on ``sys.path`` while it loads, so it can import its neighbours). A module in training mode is
refused with the submodules that are training: BatchNorm would use batch statistics and Dropout
would drop, so the "reference" would be neither reproducible nor what was deployed.

What PyTorch consumes: by default each benchmark sample's arrays, as tensors, positionally in the
ONNX model's input order. When the same file defines ``make_inputs(sample)`` (``sample`` maps the
ONNX input names to numpy arrays, exactly what ONNX Runtime is fed), its result is what the module
is called with: a tensor, a tuple or list of positional arguments, or a dict of keyword arguments.
That is where the PyTorch side's own preprocessing belongs; the input check then compares what the
module really consumed (a forward pre-hook) with the benchmark set's arrays.

``torch`` is imported here lazily, when a factory is loaded: onnxmon works without it.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import MonitorError

INPUTS_HOOK = "make_inputs"
# onnxmon is installed from its clone (it is not on PyPI): the `torch` extra, the same way
INSTALL = "pip install -e '.[torch]'"


class FactoryError(MonitorError):
    """The factory cannot be loaded, raises, or returns something that is not an eval-mode ``nn.Module``."""


@dataclass(frozen=True)
class Factory:
    """A loaded factory: the module it returned and the optional ``make_inputs`` of its file."""

    spec: str
    module: Any  # torch.nn.Module; typed loosely so this file imports without torch
    make_inputs: Callable[[Mapping[str, np.ndarray]], Any] | None


def import_torch() -> Any:
    """The ``torch`` package, or a ``MonitorError`` saying how to install it."""
    try:
        import torch
    except ImportError as exc:
        raise MonitorError(
            f"PyTorch references need torch ({exc}); from the onnxmon clone: {INSTALL} (docs/pytorch.md)"
        ) from None
    return torch


def parse_spec(spec: str) -> tuple[Path, str]:
    """``path/to/file.py:make_model`` -> (path, function name); ``FactoryError`` saying what was expected."""
    path_text, sep, name = spec.rpartition(":")
    if not sep or not path_text or not name.isidentifier():
        raise FactoryError(f"--factory {spec!r}: expected FILE.py:FUNCTION, e.g. models.py:make_model")
    path = Path(path_text)
    if path.suffix != ".py":
        raise FactoryError(f"--factory {spec!r}: {path} is not a .py file")
    if not path.is_file():
        raise FactoryError(f"--factory {spec!r}: {path} not found")
    return path, name


def load(spec: str) -> Factory:
    """Import the file, call the function, check what it returned (an ``nn.Module`` in eval mode)."""
    torch = import_torch()
    path, name = parse_spec(spec)
    namespace = _import_file(path, spec)
    function = getattr(namespace, name, None)
    if not callable(function):
        defined = sorted(k for k, v in vars(namespace).items() if callable(v) and not k.startswith("_"))
        raise FactoryError(f"--factory {spec!r}: {path} defines no function {name!r}; it defines {defined}")
    try:
        module = function()
    except (Exception, SystemExit) as exc:  # sys.exit() in user code must not end onnxmon with its code
        raise FactoryError(f"--factory {spec!r}: {name}() raised {type(exc).__name__}: {exc}") from None
    if not isinstance(module, torch.nn.Module):
        raise FactoryError(f"--factory {spec!r}: {name}() returned {type(module).__name__}, expected a torch.nn.Module")
    training = [qualified or "the model itself" for qualified, sub in module.named_modules() if sub.training]
    if training:
        shown = ", ".join(training[:5]) + (f" and {len(training) - 5} more" if len(training) > 5 else "")
        raise FactoryError(
            f"--factory {spec!r}: {name}() returned a module in training mode ({shown}): BatchNorm would use"
            " batch statistics and Dropout would drop, so it is no reference; call .eval() before returning it"
        )
    make_inputs = getattr(namespace, INPUTS_HOOK, None)
    if make_inputs is not None and not callable(make_inputs):
        raise FactoryError(f"--factory {spec!r}: {path} defines {INPUTS_HOOK} but it is not a function")
    return Factory(spec=spec, module=module, make_inputs=make_inputs)


def _import_file(path: Path, spec: str) -> Any:
    directory = str(path.resolve().parent)
    module_name = f"onnxmon_factory_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise FactoryError(f"--factory {spec!r}: {path} cannot be imported")
    namespace = importlib.util.module_from_spec(loader_spec)
    sys.path.insert(0, directory)
    sys.modules[module_name] = namespace
    try:
        loader_spec.loader.exec_module(namespace)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module_name, None)
        raise FactoryError(f"--factory {spec!r}: importing {path} raised {type(exc).__name__}: {exc}") from None
    finally:
        if directory in sys.path:
            sys.path.remove(directory)
    return namespace
