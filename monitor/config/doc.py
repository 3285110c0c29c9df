"""The configuration reference, generated from the pydantic schema (``docs/config.md``).

Generated, not written by hand, so the reference cannot drift from the code: a test
compares ``docs/config.md`` with ``render()``, and ``onnxmon config reference`` prints it.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from monitor.config.settings import Settings

HEADER = """# Configuration reference

Generated from the pydantic schema in `monitor/config/settings.py` by `onnxmon config reference`;
do not edit by hand. Every key can be overridden from the environment with the `ONNXMON_`
prefix and `__` for nesting (`ONNXMON_STORE__URL`, `ONNXMON_MODELS__0__REPEATS`).
Durations accept `90`, `"90s"`, `"15m"`, `"1h"`, `"7d"`. Relative paths resolve against the
config file's directory.

| key | type | default | meaning |
|---|---|---|---|
"""


def render() -> str:
    rows = [f"| `{key}` | {kind} | {default} | {doc} |" for key, kind, default, doc in fields(Settings, "")]
    return HEADER + "\n".join(rows) + "\n"


def fields(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, str, str, str]]:
    """(key path, type, default, meaning) for every field of ``model``, depth first."""
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        key = f"{prefix}{name}"
        nested, suffix = _nested(info.annotation)
        doc = _doc(info, nested)
        if nested is not None:
            yield key, _type_name(info.annotation), "", doc
            yield from fields(nested, f"{key}{suffix}.")
        else:
            yield key, _type_name(info.annotation), _default(info), doc


def _nested(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """The model inside ``X``, ``X | None``, ``list[X]`` or ``dict[str, X]``, with its key suffix."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation, ""
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            model, suffix = _nested(arg)
            if model is not None:
                return model, suffix
    if origin is list and args:
        model, _ = _nested(args[0])
        return model, "[]"
    if origin is dict and len(args) == 2:
        model, _ = _nested(args[1])
        return model, ".<name>"
    if origin is typing.Annotated:
        return _nested(args[0])
    return None, ""


def _type_name(annotation: Any) -> str:
    text = str(annotation).replace("typing.", "").replace("pathlib.", "")
    text = text.replace("monitor.config.schema.", "").replace("monitor.config.settings.", "")
    text = text.replace("monitor.config.decisions.", "").replace("monitor.config.serve_schema.", "")
    text = text.replace("<class '", "").replace("'>", "")
    if "BeforeValidator(func=<function parse_duration" in text:
        text = "duration" + (" \\| None" if "None" in text else "")
    elif "Annotated[list[ProviderSpec]" in text:
        text = "list[ProviderSpec \\| str]"
    return text.replace("|", "\\|").replace("\\\\|", "\\|")


def _default(info: FieldInfo) -> str:
    if info.default is PydanticUndefined:
        return "required"
    value = info.default
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, Path):
        return f"`{value}`"
    return f"`{value!r}`" if value not in (None, {}, []) else ("—" if value is None else f"`{value!r}`")


def _doc(info: FieldInfo, nested: type[BaseModel] | None) -> str:
    if info.description:
        return info.description
    if nested is not None and nested.__doc__:
        return nested.__doc__.strip().splitlines()[0]
    return ""
