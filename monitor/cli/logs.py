"""Logging of the long-running commands: ``--log-level``, ``--log-format text|json``, quiet third parties.

The format and level come from the flags when given, else from the config's ``logging`` section
(``logging.format``, ``logging.level``; ``ONNXMON_LOGGING__FORMAT=json`` through the usual env
override), so a pod whose arguments are fixed can switch to JSON logs from its config or env.

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
from monitor.config.serve_schema import LOG_FORMATS, LOG_LEVELS, LoggingConfig

LEVELS = LOG_LEVELS
FORMATS = LOG_FORMATS
FIELDS = "onnxmon_fields"
"""The ``extra`` key under which a log call hands structured fields (``sinks.log.LogSink`` does)."""

LevelOption = typer.Option(
    None,
    "--log-level",
    metavar="LEVEL",
    help="debug | info | warning | error | critical (default: logging.level, info)",
)
FormatOption = typer.Option(
    None,
    "--log-format",
    metavar="FORMAT",
    help="text | json: one JSON object per line, check fields at top level (default: logging.format, text)",
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


def check_flags(level: str | None, fmt: str | None) -> None:
    """``typer.BadParameter`` (exit 2) for an unknown ``--log-level`` or ``--log-format``, before anything starts."""
    if level is not None and level.lower() not in LEVELS:
        raise typer.BadParameter(f"expected one of {' | '.join(LEVELS)}, got {level!r}", param_hint="'--log-level'")
    if fmt is not None and fmt.lower() not in FORMATS:
        raise typer.BadParameter(f"expected one of {' | '.join(FORMATS)}, got {fmt!r}", param_hint="'--log-format'")


def configure_from(config: LoggingConfig, level: str | None, fmt: str | None) -> logging.Handler:
    """Install the handler: each flag given wins over the config's ``logging`` section."""
    return configure(level or config.level, fmt or config.format)


def configure(level: str, fmt: str, stream: IO[str] | None = None) -> logging.Handler:
    """Install one handler on the root logger; ``typer.BadParameter`` (exit 2) for an unknown level or format."""
    check_flags(level, fmt)
    name = level.lower()
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
