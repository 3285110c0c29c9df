"""A first setup against a server database: an un-migrated PostgreSQL, a URL without its driver.

Every command that reads or writes the store says what is wrong in one line (no traceback) and
writes nothing first: before this, ``baseline capture --promote`` on an empty PostgreSQL printed a
100-line traceback *after* writing the baseline and making it ACTIVE on disk, and ``baseline
history`` then said it was "not captured through onnxmon". ``store.migrate: auto`` migrates instead.
Through the real console script, in a subprocess, against a real PostgreSQL schema.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.store import Store
from tests import modelzoo
from tests.databases import postgres_schema
from tests.stacks import child_env
from tests.workspace import Workspace

pytestmark = pytest.mark.process

ONNXMON = Path(sys.executable).parent / "onnxmon"


def onnxmon(ws: Workspace, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ONNXMON), *args, "-c", str(ws.config_file)],
        cwd=ws.root,
        env={**child_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The command's stderr, asserted to be one ``onnxmon: error:`` line and no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("onnxmon: error: "), done.stderr
    return lines[0]


@pytest.fixture
def empty_postgres(postgres_url: str) -> Iterator[str]:
    with postgres_schema(postgres_url) as url:
        yield url


@pytest.fixture
def ws(tmp_path: Path, empty_postgres: str) -> Workspace:
    workspace = Workspace(tmp_path)
    workspace.add_model("clf", modelzoo.classifier(), count=2)
    workspace.extra["store"] = {"url": empty_postgres}
    workspace.write()
    return workspace


@pytest.mark.postgres
@pytest.mark.parametrize(
    "command",
    [
        ("baseline", "capture", "clf", "--promote"),
        ("check", "clf"),
        ("incident", "list"),
        ("history", "clf"),
        ("diagnose", "clf"),
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_a_command_against_an_unmigrated_postgresql_says_so_in_one_line_and_writes_nothing(
    ws: Workspace, command: tuple[str, ...]
) -> None:
    done = onnxmon(ws, *command)
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line_error(done)
    assert "schema revision none" in line and "onnxmon db upgrade" in line and "store.migrate: auto" in line
    assert not (ws.root / "baselines" / "clf").exists(), "nothing on disk, no ACTIVE without its store record"


@pytest.mark.postgres
def test_baseline_history_against_an_unmigrated_postgresql_warns_in_one_whole_sentence(
    ws: Workspace, empty_postgres: str
) -> None:
    # before: "store not read (MonitorError: ... (or set store.migrate: auto); nothing was)": a class
    # name and a sentence cut at 200 characters
    done = onnxmon(ws, "baseline", "history", "clf")
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith("onnxmon: warning: store not read: ") and "Error" not in line, line
    assert "run `onnxmon db upgrade` first (or set store.migrate: auto); nothing was written;" in line, line


@pytest.mark.postgres
def test_promote_against_an_unmigrated_postgresql_leaves_active_as_it_was(ws: Workspace, empty_postgres: str) -> None:
    auto = {"ONNXMON_STORE__MIGRATE": "auto"}
    ids = []
    for _ in range(2):  # the first baseline becomes active by itself; the second is a candidate
        captured = onnxmon(ws, "baseline", "capture", "clf", "-o", "json", env=auto)
        assert captured.returncode == 0, captured.stderr
        ids.append(json.loads(captured.stdout)["id"])
    active = ws.root / "baselines" / "clf" / "ACTIVE"
    assert active.read_text().strip() == ids[0]
    with Store(empty_postgres) as store, store.engine.begin() as connection:  # the schema's version is lost
        connection.exec_driver_sql("DROP TABLE alembic_version")
    done = onnxmon(ws, "baseline", "promote", ids[1])
    assert done.returncode == 2
    one_line_error(done)
    assert active.read_text().strip() == ids[0], "ACTIVE unchanged: the store could not record the promotion"


@pytest.mark.postgres
def test_store_migrate_auto_migrates_on_first_use_and_capture_is_recorded(ws: Workspace, empty_postgres: str) -> None:
    done = onnxmon(ws, "baseline", "capture", "clf", "--promote", "-o", "json", env={"ONNXMON_STORE__MIGRATE": "auto"})
    assert done.returncode == 0, done.stderr
    baseline_id = json.loads(done.stdout)["id"]
    with Store(empty_postgres) as store:
        assert store.current_revision() == store.head_revision()
        (record,) = store.baseline_history("clf")
        assert record.baseline_id == baseline_id and record.is_active
    history = onnxmon(ws, "baseline", "history", "clf", "-o", "json")
    assert history.returncode == 0, history.stderr
    assert "not captured through onnxmon" not in history.stdout


def test_a_postgresql_url_without_its_driver_names_the_extra_to_install(tmp_path: Path) -> None:
    # pg8000 is a PostgreSQL driver SQLAlchemy knows and this environment lacks, as `.[cpu]` lacks
    # psycopg: the same ModuleNotFoundError at engine creation
    pytest.importorskip("sqlalchemy")
    with pytest.raises(ImportError):
        import pg8000  # noqa: F401
    workspace = Workspace(tmp_path)
    workspace.add_model("clf", modelzoo.classifier(), count=2)
    workspace.extra["store"] = {"url": "postgresql+pg8000://onnxmon:secret@127.0.0.1:5432/test"}
    workspace.write()
    for command in (("check", "clf"), ("incident", "list"), ("baseline", "capture", "clf"), ("history", "clf")):
        done = onnxmon(workspace, *command)
        assert done.returncode == 2, done.stdout + done.stderr
        line = one_line_error(done)
        assert "'postgres' extra" in line and "postgresql+psycopg://" in line and "'pg8000'" in line, line
        assert "secret" not in line, "the password is masked"
    assert not (tmp_path / "baselines" / "clf").exists()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgres://onnxmon:secret@127.0.0.1:5432/test", "write the URL as postgresql+psycopg://"),
        (
            "mysql://onnxmon:secret@127.0.0.1:3306/test",
            "onnxmon keeps its history in SQLite (sqlite:///FILE) or in PostgreSQL",
        ),
    ],
    ids=["postgres scheme", "another database"],
)
def test_a_url_onnxmon_cannot_use_says_what_to_write_instead(tmp_path: Path, url: str, expected: str) -> None:
    # before: postgres:// (as Heroku and many tools print it) ended in "NoSuchModuleError: Can't load
    # plugin: sqlalchemy.dialects:postgres"; mysql:// was told to install the 'postgres' extra
    workspace = Workspace(tmp_path)
    workspace.add_model("clf", modelzoo.classifier(), count=2)
    workspace.extra["store"] = {"url": url}
    workspace.write()
    for command in (("history", "clf"), ("baseline", "capture", "clf")):
        done = onnxmon(workspace, *command)
        assert done.returncode == 2, done.stdout + done.stderr
        line = one_line_error(done)
        assert expected in line and "secret" not in line, line
    assert not (tmp_path / "baselines" / "clf").exists()


@pytest.mark.postgres
def test_serve_on_an_unmigrated_postgresql_stops_in_one_line_or_migrates_with_auto(
    ws: Workspace, empty_postgres: str
) -> None:
    from tests.serving import Served, free_port

    done = subprocess.run(
        [str(ONNXMON), "serve", "-c", str(ws.config_file), "--port", str(free_port())],
        cwd=ws.root,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "store.migrate: auto" in one_line_error(done)
    with Store(empty_postgres) as store:
        assert store.current_revision() is None, "nothing migrated, nothing written"
    served = Served(ws, free_port(), base_env=child_env(), env={"ONNXMON_STORE__MIGRATE": "auto"})
    try:
        with Store(empty_postgres) as store:
            assert store.current_revision() == store.head_revision()
        served.wait_until(lambda: '"clf"' in served.get("/api/v1/models")[1], "the API to list clf")
    finally:
        assert served.stop() == 0


@pytest.fixture
def own_database(postgres_url: str) -> Iterator[str]:
    """A database of its own on the test server (an outage of it stops no one else), dropped afterwards."""
    import uuid

    import psycopg

    name = f"onnxmon_outage_{uuid.uuid4().hex[:12]}"
    admin = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _outage(url: str) -> None:
    """The database stops taking connections and drops the ones it has (a failover, a restart)."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0].replace("postgresql+psycopg://", "postgresql://") + "/postgres",
                         autocommit=True) as connection:  # fmt: skip
        connection.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        connection.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))


@pytest.mark.postgres
@pytest.mark.parametrize("first", [True, False], ids=["first baseline", "over an active one"])
def test_a_store_outage_during_capture_leaves_active_and_the_disk_as_they_were(
    tmp_path: Path, own_database: str, first: bool
) -> None:
    # before: the child wrote the baseline and ACTIVE, the store record then failed (exit 3), and
    # ACTIVE named a baseline the store never recorded
    import threading
    import time

    workspace = Workspace(tmp_path)
    workspace.add_model("clf", modelzoo.classifier(), count=4000)  # a capture of a few seconds
    workspace.extra["store"] = {"url": own_database, "migrate": "auto"}
    workspace.write()
    active = tmp_path / "baselines" / "clf" / "ACTIVE"
    if not first:
        assert onnxmon(workspace, "baseline", "capture", "clf", "-q").returncode == 0
    before = sorted(p.name for p in (tmp_path / "baselines").rglob("*")) if not first else []
    was = active.read_text() if not first else None
    log = tmp_path / "baselines" / "clf" / "promotions.jsonl"
    logged = log.read_text() if not first else None

    def writing() -> int:
        return len(list((tmp_path / "baselines").rglob("outputs")))

    already = writing()

    def cut_when_capturing() -> None:  # the readiness check passed; the child is writing samples
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and writing() == already:
            time.sleep(0.05)
        _outage(own_database)

    cutter = threading.Thread(target=cut_when_capturing)
    cutter.start()
    done = onnxmon(workspace, "baseline", "capture", "clf", "--promote")
    cutter.join()
    assert done.returncode == 3, done.stdout + done.stderr
    assert "not currently accepting connections" in one_line_error(done)
    if first:
        assert not (tmp_path / "baselines" / "clf").exists(), "nothing on disk"
    else:
        assert active.read_text() == was and log.read_text() == logged
        assert sorted(p.name for p in (tmp_path / "baselines").rglob("*")) == before, "the new baseline is gone"
