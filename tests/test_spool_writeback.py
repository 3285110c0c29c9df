"""The spool's write-back: exactly once through crashes, and in order past any sequence number.

Real SQLite files and a real PostgreSQL schema, real ``kill -9`` of a real process writing the
backlog back. The rule under test: rows in the store + entries left in the spool = results measured,
whatever point the writer was killed at.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from monitor.results import CheckResult, Verdict
from monitor.sinks.database import DatabaseSink
from monitor.sinks.spool import Spool
from monitor.store import Store
from tests.databases import BACKENDS, database_url

ROOT = Path(__file__).resolve().parents[1]


def a_result(index: int) -> CheckResult:
    return CheckResult(model="m", verdict=Verdict.PASS, started_at=1000.0 + index, finished_at=1000.5 + index)


def started(store: Store) -> list[float]:
    return sorted(r.started_at.timestamp() for r in store.runs("m", limit=10_000))


def test_an_entry_past_twelve_digits_keeps_the_queue_in_order_and_nothing_is_lost(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    first = spool.append(a_result(0))
    first.rename(spool.directory / "999999999999.json")  # e.g. left by a long-lived queue, or put there
    for index in range(1, 4):
        spool.append(a_result(index))
    assert [p.name for p in spool.entries()][:2] == ["999999999999.json", "1000000000000.json"]
    assert len(spool) == 4
    store = Store(f"sqlite:///{tmp_path / 'h.db'}")
    store.upgrade()
    sink = DatabaseSink(store, spool=spool, retry_s=3600)
    assert sink.flush() == 4
    assert started(store) == [1000.0, 1001.0, 1002.0, 1003.0]
    sink.close()
    store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_entry_left_on_disk_after_its_commit_is_not_written_twice(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with database_url(backend, tmp_path, request) as url, Store(url) as store:
        store.upgrade()
        spool = Spool(tmp_path / "spool")
        entry = spool.append(a_result(0))
        kept = tmp_path / "kept.json"
        shutil.copy(entry, kept)
        sink = DatabaseSink(store, spool=spool, retry_s=3600)
        assert sink.flush() == 1
        shutil.copy(kept, entry)  # what a kill -9 between the commit and the unlink leaves behind
        spool.append(a_result(1))
        sink.flush()  # the first entry is recognised as already stored, the second is written
        assert started(store) == [1000.0, 1001.0]
        assert sink.spooled == 0 and spool.failed() == []
        sink.close()


WRITER = """
    import sys
    from pathlib import Path
    from monitor.sinks.database import DatabaseSink
    from monitor.sinks.spool import Spool
    from monitor.store import Store
    store = Store(f"sqlite:///{sys.argv[1]}")
    sink = DatabaseSink(store, spool=Spool(Path(sys.argv[2])), retry_s=3600)
    print("ready", flush=True)
    sink.flush()
"""


@pytest.mark.database
@pytest.mark.process
def test_kill_9_at_random_points_of_the_write_back_writes_every_result_exactly_once(tmp_path: Path) -> None:
    count = 300
    spool = Spool(tmp_path / "spool")
    for index in range(count):
        spool.append(a_result(index))
    database = tmp_path / "h.db"
    with Store(f"sqlite:///{database}") as store:
        store.upgrade()
    chance = random.Random(30)
    kills = 0
    while len(spool) and kills < 40:
        writer = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(WRITER), str(database), str(spool.directory)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        time.sleep(chance.uniform(0.0, 0.4))
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(30)
        kills += 1
    with Store(f"sqlite:///{database}") as store:
        stored = started(store)
        left = len(spool)
        assert len(stored) == len(set(stored)), f"{len(stored) - len(set(stored))} run(s) written twice"
        DatabaseSink(store, spool=spool, retry_s=3600).flush()
        assert started(store) == [1000.0 + i for i in range(count)], (kills, left)


APPENDER = """
import sys
from monitor.results import CheckResult, Verdict
from monitor.sinks.spool import Spool
spool = Spool(sys.argv[1], max_results=100_000)
sys.stdin.readline()  # both start together
for index in range(int(sys.argv[2])):
    spool.append(CheckResult(sys.argv[3] + str(index), Verdict.PASS, 0.0, 1.0))
"""


@pytest.mark.process
def test_two_processes_appending_at_once_lose_no_result(tmp_path: Path) -> None:
    """A daemon and a hand-run ``check`` share a spool: the same sequence number taken twice replaced a result."""
    count = 300
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(tmp_path / "spool"), str(count), name],
            stdin=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()
    assert [writer.wait(120) for writer in writers] == [0, 0]
    spool = Spool(tmp_path / "spool")
    models = sorted(spool.read(path).result.model for path in spool.entries())
    assert models == sorted(f"{name}{index}" for name in ("a", "b") for index in range(count))
    assert not [p for p in (tmp_path / "spool").iterdir() if p.name.startswith(".tmp-")]
