"""Logging of the long-running commands: ``--log-level``, ``--log-format text|json``, quiet third parties.

``json`` writes one object per line: ``time`` (RFC 3339 UTC), ``level``, ``logger``, ``message``,
and, for a check result, the check's own fields (``event``, ``model``, ``verdict``, ...) at the
top level instead of a JSON string inside the message, so a log pipeline indexes them as they
are. Alembic's INFO lines ("Context impl SQLiteImpl", "Will assume transactional DDL") are
noise at every start and are shown only at ``debug``. An unknown level is a usage error.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any

import typer

from monitor import jsonsafe

LEVELS = ("debug", "info", "warning", "error", "critical")
FORMATS = ("text", "json")
FIELDS = "onnxmon_fields"
"""The ``extra`` key under which a log call hands structured fields (``sinks.log.LogSink`` does)."""

LevelOption = typer.Option("info", "--log-level", metavar="LEVEL", help="debug | info | warning | error | critical")
FormatOption = typer.Option(
    "text", "--log-format", metavar="FORMAT", help="text | json (one JSON object per line, check fields at top level)"
)


class JsonFormatter(logging.Formatter):
    """One strict JSON object per record (``monitor.jsonsafe``)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": jsonsafe.timestamp(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            line.update(fields)
        else:
            line["message"] = record.getMessage()
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return jsonsafe.dumps(line, default=str)


def configure(level: str, fmt: str, stream: IO[str] | None = None) -> logging.Handler:
    """Install one handler on the root logger; ``typer.BadParameter`` (exit 2) for an unknown level or format."""
    name = level.lower()
    if name not in LEVELS:
        raise typer.BadParameter(f"expected one of {' | '.join(LEVELS)}, got {level!r}", param_hint="'--log-level'")
    if fmt.lower() not in FORMATS:
        raise typer.BadParameter(f"expected one of {' | '.join(FORMATS)}, got {fmt!r}", param_hint="'--log-format'")
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt.lower() == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, name.upper()))
    if name != "debug":
        logging.getLogger("alembic").setLevel(logging.WARNING)
    return handler
