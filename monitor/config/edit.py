"""Add an entry to a config file's ``models:`` or ``benchsets:`` list, keeping the rest of the file as written.

``onnxmon add`` writes into the user's own YAML: comments, key order, quoting and blank lines
are theirs. So the file is never re-dumped: ``upsert`` edits its text where ``yaml.compose``
places the list (after the list's last item, or in place of the item being replaced), and
``edited`` proves the edit by parsing the result: it must equal the old data with exactly this
entry added or replaced, else nothing is written and the user is shown the block to paste.
``write_atomic`` replaces the file in one rename (a crash leaves the old file or the new one).
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from monitor.errors import ConfigError

SECTIONS = ("benchsets", "models")


def block(entry: Mapping[str, Any], indent: int) -> str:
    """``entry`` as one block-sequence item (``- name: ...``), every line indented by ``indent``, no final newline.

    Mappings of plain values stay on one line (``dims: {batch: 1}``), as the bundled example writes them.
    """
    text = yaml.safe_dump([dict(entry)], sort_keys=False, default_flow_style=None, allow_unicode=True, width=10_000)
    return "\n".join(" " * indent + line for line in text.rstrip("\n").splitlines())


def upsert(text: str, section: str, entry: Mapping[str, Any]) -> str:
    """``text`` with ``entry`` in top-level list ``section``: replacing the item of the same name, else appended."""
    root = _compose(text)
    found = None if root is None else next((v for k, v in root.value if k.value == section), None)
    if found is None:  # no such section (or an empty file): a block of its own at the end
        head = text if not text or text.endswith("\n") else text + "\n"
        return f"{head}{section}:\n{block(entry, 2)}\n"
    if isinstance(found, yaml.ScalarNode) and found.tag.endswith(":null"):  # `models:` or `models: ~`
        return text[: found.start_mark.index] + "\n" + block(entry, 2) + text[found.end_mark.index :]
    if not isinstance(found, yaml.SequenceNode):
        raise ConfigError(f"top-level {section!r} is not a list; cannot add an entry to it")
    items = found.value
    named = [i for i, item in enumerate(items) if _name(item) == entry.get("name")]
    if found.flow_style:
        flow = yaml.safe_dump(dict(entry), default_flow_style=True, sort_keys=False, width=10_000).strip()
        if named:
            item = items[named[0]]
            return text[: item.start_mark.index] + flow + text[item.end_mark.index :]
        close = found.end_mark.index - 1  # the `]`
        return text[:close] + (", " if items else "") + flow + text[close:]
    if named:
        item = items[named[0]]
        start = text.rindex("-", 0, item.start_mark.index)
        dash = start - (text.rfind("\n", 0, start) + 1)
        end = _after(text, item)
        replacement = block(entry, dash)[dash:]
        return text[:start] + replacement + ("\n" if _at_line_start(text, end) else "") + text[end:]
    last = items[-1]
    start = text.rindex("-", 0, last.start_mark.index)
    dash = start - (text.rfind("\n", 0, start) + 1)
    end = _after(text, last)
    if _at_line_start(text, end):
        return text[:end] + block(entry, dash) + "\n" + text[end:]
    return text[:end] + "\n" + block(entry, dash) + text[end:]


def edited(text: str, entries: Mapping[str, Mapping[str, Any]], where: Path) -> str:
    """``text`` with each ``section -> entry`` upserted, proven by parsing: ``ConfigError`` when it cannot be.

    ``where`` names the file in the error, which shows the entries to add by hand.
    """
    before = _load(text, where)
    result = text
    expected = copy.deepcopy(before)
    for section, entry in entries.items():
        result = upsert(result, section, entry)
        listed = list(expected.get(section) or [])
        names = [item.get("name") if isinstance(item, Mapping) else None for item in listed]
        if entry.get("name") in names:
            listed[names.index(entry.get("name"))] = dict(entry)
        else:
            listed.append(dict(entry))
        expected[section] = listed
    if _load(result, where) != expected:
        shown = "\n".join(f"{section}:\n{block(entry, 2)}" for section, entry in entries.items())
        raise ConfigError(f"{where}: cannot add to this file without rewriting it; add by hand:\n{shown}")
    return result


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename, keeping its permissions; fsynced file and directory."""
    directory = path.parent if str(path.parent) else Path(".")
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory: best effort
    finally:
        os.close(dir_fd)


def _compose(text: str) -> yaml.MappingNode | None:
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config is not valid YAML: {exc}") from None
    if root is not None and not isinstance(root, yaml.MappingNode):
        raise ConfigError("config: expected a mapping at the top level")
    return root


def _load(text: str, where: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _name(item: yaml.Node) -> str | None:
    if isinstance(item, yaml.MappingNode):
        for key, value in item.value:
            if key.value == "name" and isinstance(value, yaml.ScalarNode):
                return str(value.value)
    return None


def _after(text: str, item: yaml.Node) -> int:
    """Where an item of a block list ends: the end of the line of its last value (its comment kept before).

    A block list's own end mark lies at the next key, past the comments between; the last plain
    value's is exact. A block scalar (``|``) ends at the start of a line.
    """
    node = item
    while isinstance(node, yaml.MappingNode | yaml.SequenceNode) and not node.flow_style and node.value:
        node = node.value[-1][1] if isinstance(node, yaml.MappingNode) else node.value[-1]
    end = node.end_mark.index
    if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
        return end
    newline = text.find("\n", end)
    return len(text) if newline < 0 else newline


def _at_line_start(text: str, index: int) -> bool:
    return index > 0 and text[index - 1] == "\n"
