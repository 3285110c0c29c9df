"""``store.url_file``: the database URL from a mounted secret file, never from an env var or the config.

The Helm chart mounts the secret and points ``store.url_file`` at it; these tests read it from a
real file into a real SQLite store and a real PostgreSQL schema, and check that no message ever
carries the URL (the file's content is a secret).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from monitor import cli
from monitor.config import settings
from monitor.errors import ConfigError
from tests.databases import BACKENDS, database_url


def write_config(root: Path, store: dict[str, object]) -> Path:
    path = root / "onnxmon.yaml"
    path.write_text(yaml.safe_dump({"store": store}), encoding="utf-8")
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_store_url_comes_from_the_file_and_db_commands_use_it(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    with database_url(backend, tmp_path, request) as url:
        (tmp_path / "secret").mkdir()
        (tmp_path / "secret" / "url").write_text(url + "\n", encoding="utf-8")  # a trailing newline, as kubectl writes
        path = write_config(tmp_path, {"url_file": "secret/url"})  # relative to the config file
        assert settings.load(path).store.url == url
        assert cli.main(["db", "upgrade", "-c", str(path)]) == 0
        capsys.readouterr()
        assert cli.main(["-c", str(path), "db", "current", "-o", "json"]) == 0
        current = json.loads(capsys.readouterr().out)
        assert current["up_to_date"] is True and current["revision"] == current["head"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "not found (expected a file holding the database URL)"),
        ("", "is empty (expected one line: the database URL)"),
        ("  \n", "is empty"),
        ("hunter2-not-a-url", "does not hold a database URL"),
        ("postgresql://u:hunter2@h/db\nsecond line", "does not hold a database URL"),
    ],
    ids=["missing", "empty", "blank", "not a url", "two lines"],
)
def test_a_bad_url_file_is_a_config_error_naming_the_file_and_never_its_content(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    secret = tmp_path / "url"
    if content is not None:
        secret.write_text(content, encoding="utf-8")
    path = write_config(tmp_path, {"url_file": str(secret)})
    with pytest.raises(ConfigError) as caught:
        settings.load(path)
    message = str(caught.value)
    assert f"store.url_file: {secret}" in message and expected in message
    assert "hunter2" not in message


def test_url_and_url_file_together_are_refused(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("sqlite:///x.db", encoding="utf-8")
    path = write_config(tmp_path, {"url": "sqlite:///y.db", "url_file": "url"})
    with pytest.raises(ConfigError, match=r"set store\.url or store\.url_file, not both"):
        settings.load(path)


def test_config_show_masks_the_password_read_from_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "url").write_text("postgresql+psycopg://onnxmon:hunter2@db:5432/onnxmon", encoding="utf-8")
    path = write_config(tmp_path, {"url_file": "url"})
    assert cli.main(["config", "show", "-c", str(path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "hunter2" not in json.dumps(shown)
    assert shown["store"]["url_file"] == str(tmp_path / "url")


SPECIAL = {
    "directory": lambda p: p.mkdir(),
    "fifo": lambda p: os.mkfifo(p),
    "huge": lambda p: p.write_bytes(b"postgresql://u:hunter2@h/db" + b"x" * (1 << 20)),
}


@pytest.mark.process
@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("directory", "is not a regular file (expected a file holding the database URL)"),
        ("fifo", "is not a regular file (expected a file holding the database URL)"),
        ("huge", "is larger than"),
    ],
)
def test_a_url_file_that_is_a_directory_a_fifo_or_huge_is_refused_without_hanging(
    tmp_path: Path, kind: str, expected: str
) -> None:
    # A FIFO nobody writes to would block read_text() forever: load in a child with a deadline.
    secret = tmp_path / "url"
    SPECIAL[kind](secret)
    path = write_config(tmp_path, {"url_file": str(secret)})
    probe = (
        "import sys\nfrom monitor.config import settings\nfrom monitor.errors import ConfigError\n"
        "try:\n    settings.load(sys.argv[1])\nexcept ConfigError as exc:\n    print(exc)\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"loading a config whose store.url_file is a {kind} hung")
    assert f"store.url_file: {secret}" in done.stdout and expected in done.stdout, done.stdout + done.stderr
    assert "hunter2" not in done.stdout


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_url_file_is_a_config_error(tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text("sqlite:///x.db", encoding="utf-8")
    secret.chmod(0)
    path = write_config(tmp_path, {"url_file": str(secret)})
    with pytest.raises(ConfigError, match=r"store\.url_file: .* cannot be read: Permission denied"):
        settings.load(path)
