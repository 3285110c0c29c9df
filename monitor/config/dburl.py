"""The database URL's secrets: ``mask_url`` hides every password in one, ``from_file`` reads one from a file.

A URL is masked wherever it is shown (``config show``, logs, errors, pages, the spool's folder
name): the ``user:password@`` part and query parameters such as ``password``, ``sslpassword`` or
``token``. ``store.url_file`` (a mounted secret) holds one line, the URL; its content never appears
in an error.
"""

from __future__ import annotations

import errno
import re
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from monitor import bounded
from monitor.config.fields import has_control_characters
from monitor.config.schema import URL_SHAPE, StoreConfig
from monitor.errors import ConfigError

MAX_URL_FILE = 64 * 1024  # a database URL is one line; a bigger "secret" is a mistake
# Query parameters that carry a secret in SQLAlchemy/libpq URLs (``?password=``, ``?sslpassword=``...).
_SECRET_PARAMETER = re.compile(r"pass|pwd|secret|token|key", re.IGNORECASE)
_SECRET_PARAMETER_EXCEPTIONS = frozenset({"sslkey", "sslrootkey"})  # paths of key files, not secrets


def mask_url(url: str) -> str:
    """``postgresql://user:***@host/db?password=***``: a URL with every password replaced, the rest unchanged.

    Both places a driver reads a password from are masked: the ``user:password@`` part and query
    parameters such as ``password``, ``sslpassword`` or ``token``.
    """
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", ":***@", 1)
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        masked = [
            (key, "***" if _SECRET_PARAMETER.search(key) and key.lower() not in _SECRET_PARAMETER_EXCEPTIONS else value)
            for key, value in pairs
        ]
        if masked != pairs:
            query = urllib.parse.urlencode(masked, safe="*/")
    if netloc == parts.netloc and query == parts.query:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def from_file(store: StoreConfig, rel: Callable[[Path], Path]) -> str:
    """``store.url_file``'s content (one line, a mounted secret); the URL itself never appears in an error."""
    assert store.url_file is not None
    if "url" in store.model_fields_set:
        raise ConfigError("store: set store.url or store.url_file, not both")
    path = rel(store.url_file)
    try:
        url = bounded.read_text(path, limit=MAX_URL_FILE).strip()
    except bounded.FileRefused as exc:
        too_big = exc.errno == errno.EFBIG
        what = f"is larger than {MAX_URL_FILE} bytes" if too_big else "is not a regular file"
        expected = "one line: the database URL" if too_big else "a file holding the database URL"
        raise ConfigError(f"store.url_file: {path} {what} (expected {expected})") from None
    except FileNotFoundError:
        raise ConfigError(f"store.url_file: {path} not found (expected a file holding the database URL)") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or type(exc).__name__
        raise ConfigError(f"store.url_file: {path} cannot be read: {why}") from None
    if not url:
        raise ConfigError(f"store.url_file: {path} is empty (expected one line: the database URL)")
    if not URL_SHAPE.match(url) or has_control_characters(url):  # a NUL, an escape, a second line
        raise ConfigError(
            f"store.url_file: {path} does not hold a database URL (expected one line like"
            " 'postgresql+psycopg://user:password@host/db')"
        )
    return url
