"""``ONNXMON_*`` environment overrides, typed by the field they set.

``ONNXMON_STORE__URL=…`` sets ``store.url``: ``__`` nests, a number indexes a list
(``ONNXMON_MODELS__0__REPEATS=3``). The value's type comes from the field, not from how the text
looks: a field that takes a string (a token, a URL, a path, a name, a choice) gets the text as it
is, so ``ONNXMON_API__TOKEN=0123`` is the string ``0123`` and ``yes`` or ``null`` stay words; any
other field (a number, a flag, a list, a mapping) reads the text as YAML, as the file would.

A variable with the prefix that names no setting is never silently dropped: a nested one
(``ONNXMON_DAEMON__NO_SUCH_KNOB``) is a ``ConfigError`` naming it and the nearest field; one that
cannot be an override (``ONNXMON_STORE_URL``, one underscore) is listed by ``unknown``, and ``load``
logs a warning naming it and the nearest setting.
"""

from __future__ import annotations

import difflib
import enum
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, SecretStr

from monitor.config.identity import NODE_VARIABLES
from monitor.errors import ConfigError

ENV_PREFIX = "ONNXMON_"

# Variables with the prefix that are read elsewhere, not settings: who reads them.
OTHER_VARIABLES = {
    "ONNXMON_CONFIG": "the config file's path",
    "ONNXMON_IMAGE_DIGEST": "the container image's digest, recorded in the environment",
    "ONNXMON_FORKSERVER_MAIN": "set by onnxmon for its own worker processes",
    **{name: "this node's name (config/identity.py)" for name in NODE_VARIABLES if name.startswith("ONNXMON_")},
}
# The test suite's and scripts' own switches (docs/development.md): not settings, never warned about.
HARNESS_PREFIXES = (
    "ONNXMON_REQUIRE",
    "ONNXMON_CORPUS_DIR",
    "ONNXMON_TEST_",
    "ONNXMON_SCREENSHOTS_DIR",
    "ONNXMON_FUZZ_EXAMPLES",
    "ONNXMON_SCENARIO_LOG",
)

_STRING_LEAVES: tuple[type, ...] = (str, Path, SecretStr, enum.Enum)


def apply(raw: dict[str, Any], environ: Mapping[str, str], root: type[BaseModel]) -> dict[str, Any]:
    """Return ``raw`` with every ``ONNXMON_A__B__0__C=value`` of ``environ`` applied under ``root``.

    Raises ``ConfigError`` naming the variable when its path names no field of a settings section.
    """
    result: dict[str, Any] = dict(raw)
    for key in sorted(environ):
        parts = _parts(key, root)
        if parts is None:
            continue
        annotation = _annotation(root, parts)
        if annotation is None:
            raise ConfigError(f"env {key}: {_missing(root, parts)}")
        text = environ[key]
        value: Any = text
        if not _takes_text(annotation):
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError:
                value = text  # validation then names the field and what it expected
        _set_path(result, parts, value, key)
    return result


def unknown(environ: Mapping[str, str], root: type[BaseModel]) -> list[str]:
    """One line per ``ONNXMON_*`` variable that is neither an override nor read elsewhere: it is ignored."""
    lines = []
    for key in sorted(environ):
        if not key.startswith(ENV_PREFIX) or key in OTHER_VARIABLES or key.startswith(HARNESS_PREFIXES):
            continue
        if _parts(key, root) is None:
            lines.append(f"environment variable {key} is not a setting and is ignored{_nearest(key, root)}")
    return lines


def _parts(key: str, root: type[BaseModel]) -> list[str] | None:
    """The field path ``key`` names, or None when it is not an override."""
    if not key.startswith(ENV_PREFIX) or key in OTHER_VARIABLES:
        return None
    rest = key[len(ENV_PREFIX) :]
    if "__" not in rest and rest.lower() not in root.model_fields:
        return None
    return [p.lower() for p in rest.split("__")]


def _annotation(model: type[BaseModel], parts: list[str]) -> Any:
    """The type of the field at ``parts``: None when a settings section has no such field, ``Any``
    where the type stops saying (list indexes and mapping keys step in)."""
    current: Any = model
    for part in parts:
        current = _step(current, part)
        if current is None or current is Any:
            return current
    return current


def _step(annotation: Any, part: str) -> Any:
    sections = False
    for option in _options(annotation):
        if isinstance(option, type) and issubclass(option, BaseModel):
            sections = True
            field = option.model_fields.get(part)
            if field is not None:
                return field.annotation
            continue
        origin, args = typing.get_origin(option), typing.get_args(option)
        if origin in (list, tuple) and args and part.isdigit():
            return args[0]
        if origin in (dict, Mapping) and len(args) == 2:
            return args[1]
    return None if sections else Any


def _missing(root: type[BaseModel], parts: list[str]) -> str:
    """``daemon has no setting 'no_such_knob'`` for the first part of ``parts`` that names nothing."""
    for depth in range(1, len(parts) + 1):
        if _annotation(root, parts[:depth]) is None:
            prefix, part = parts[: depth - 1], parts[depth - 1]
            where = ".".join(prefix) or "the top level"
            return f"{where} has no setting {part!r}{_nearest_field(root, prefix, part)}"
    return "names no setting"


def _nearest_field(root: type[BaseModel], prefix: list[str], part: str) -> str:
    names = [
        name
        for option in _options(_annotation(root, prefix) if prefix else root)
        if isinstance(option, type) and issubclass(option, BaseModel)
        for name in option.model_fields
    ]
    close = difflib.get_close_matches(part, names, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else f"; it has {sorted(names)}"


def _options(annotation: Any) -> list[Any]:
    """The alternatives of a union (``X | None``), an ``Annotated`` unwrapped; else the type itself."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _options(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [o for arg in typing.get_args(annotation) for o in _options(arg) if o is not type(None)]
    return [annotation]


def _takes_text(annotation: Any) -> bool:
    """True when every alternative of the field is a string kind: the text is the value."""
    options = _options(annotation)
    if not options:
        return False
    for option in options:
        if typing.get_origin(option) is typing.Literal:
            if not all(isinstance(v, str) for v in typing.get_args(option)):
                return False
        elif not (isinstance(option, type) and issubclass(option, _STRING_LEAVES)):
            return False
    return True


def _nearest(key: str, root: type[BaseModel]) -> str:
    names = [f"{ENV_PREFIX}{name.upper()}" for name in root.model_fields]
    for name, field in root.model_fields.items():
        for option in _options(field.annotation):
            if isinstance(option, type) and issubclass(option, BaseModel):
                names += [f"{ENV_PREFIX}{name.upper()}__{sub.upper()}" for sub in option.model_fields]
    close = difflib.get_close_matches(key, names + list(OTHER_VARIABLES), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else " (nesting takes two underscores: ONNXMON_STORE__URL)"


def _set_path(node: Any, parts: list[str], value: Any, key: str) -> None:
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"env {key}: '{part}' is not an index of a list of {len(node)} item(s)")
            if last:
                node[int(part)] = value
            else:
                node[int(part)] = _copy(node[int(part)])
                node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node[part] = _copy(node.get(part, {}))
                node = node[part]
        else:
            raise ConfigError(f"env {key}: cannot descend into a {type(node).__name__} at '{part}'")


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value
