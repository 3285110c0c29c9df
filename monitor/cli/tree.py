"""The root of the command tree: help that names values, not Python types.

Typer's help shows a parameter without a metavar as its annotation (``<bool>`` for a flag,
``<list[Path]>`` for file arguments), which means nothing to someone at a shell. The root
group, built once per invocation with every command below it, walks the tree and gives each
such parameter a shell-style metavar (``FILE...``, ``INTEGER``, nothing for a flag). Commands
added later get the same treatment without doing anything; ``tests/test_cli_help.py`` checks
the rendered help of every command.
"""

from __future__ import annotations

import pathlib
import typing
from collections.abc import Iterator
from typing import Any

from typer.core import TyperGroup

_NAMES: dict[Any, str] = {
    str: "TEXT",
    int: "INTEGER",
    float: "NUMBER",
    pathlib.Path: "PATH",
}


def walk(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command below ``command`` with its path of names (the root's path is empty), depth first.

    Typed loosely on purpose: typer ships its own copy of click, whose classes are not public.
    """
    yield path, command
    children = getattr(command, "commands", None)
    if isinstance(children, dict):
        for name in sorted(children):
            yield from walk(children[name], (*path, name))


def is_flag(param: Any) -> bool:
    return bool(getattr(param, "is_flag", False) or getattr(param, "count", False))


def metavar(param: Any) -> str:
    """The shell name of what ``param`` takes: ``""`` for a flag, ``MODEL`` or ``FILES...`` for arguments."""
    if is_flag(param):
        return ""
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    many = typing.get_origin(annotation) is list or param.nargs != 1 or bool(getattr(param, "multiple", False))
    if typing.get_origin(annotation) is list:
        (annotation,) = typing.get_args(annotation)
    if param.param_type_name == "argument":
        name = str(param.name or "value").upper()
    elif getattr(descriptor, "is_choice", False):
        name = "|".join(str(c) for c in (getattr(descriptor, "choices", None) or ()))
    else:
        name = _NAMES.get(annotation, "VALUE")
    return f"{name}..." if many else name


def readable(param: Any) -> Any:
    """``param`` with its help naming a value (``TEXT``, ``FILES...``), never a Python type; idempotent."""
    if param.param_type_name == "argument":
        if not getattr(param, "_onnxmon_readable", False):
            shown = metavar(param).replace(str(param.name or "value").upper(), _argument_type(param))
            param.display_type_rich = lambda ctx, shown=shown: shown  # an instance of this invocation only
            param._onnxmon_readable = True
        if param.metavar is None:
            param.metavar = str(param.name or "value").upper()
    elif param.metavar is None:
        param.metavar = metavar(param)
    return param


def _argument_type(param: Any) -> str:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if typing.get_origin(annotation) is list:
        (annotation,) = typing.get_args(annotation)
    return _NAMES.get(annotation, "VALUE")


def _readable_params(get_params: Any) -> Any:
    def wrapped(ctx: Any) -> list[Any]:
        return [readable(p) for p in get_params(ctx)]

    return wrapped


class RootGroup(TyperGroup):
    """The ``onnxmon`` group: every parameter of the tree, ``--help`` included, shows a readable value name.

    ``get_params`` is wrapped on each command of this invocation's tree (not on the classes), so the
    help and completion options typer adds after construction are covered too.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for _path, command in walk(self):
            for param in command.params:
                readable(param)
            setattr(command, "get_params", _readable_params(command.get_params))  # noqa: B010
