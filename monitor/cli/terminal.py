"""User text bound for a terminal, made inert: control characters are shown, never obeyed.

Incident texts, fixes and authors, model and output names, reasons: whatever a person or a model
put in the history reaches an operator's terminal through ``incident show``, ``incident list`` and
every table. An ESC there can clear the screen, retitle the window, hide text or fake output; a
carriage return or a backspace can overwrite what was printed. Every C0 control character but tab
and newline, DEL, and every C1 control (U+0080-U+009F: a lone U+009B is a CSI on some terminals)
is printed as its escape (``\\x1b``), so the operator sees that it was there.
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe(text: str) -> str:
    """``text`` with every control character but tab and newline written as ``\\xNN``."""
    return _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)
