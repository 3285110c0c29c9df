"""A ``check`` recording while another process writes the spool back (issue 42, low).

The daemon writes a backlog back oldest first while new results join the queue's tail. A ``check``
recording meanwhile shares that queue: it found it never empty, so its result joined the tail, and it
reported the store as unable to take results ("unknown"), exit 3, with the store up. And both processes
writing one entry back made the slower one's insert fail on ``runs.run_key``: a stored result was set
aside in ``failed/`` as refused.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from monitor.cli import recording
from monitor.sinks.spool import Spool
from monitor.store import Store
from tests import modelzoo
from tests.test_store import T0, result
from tests.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
BACKLOG = 1500
_DAEMON_SINK = """
import sys, time
from datetime import timedelta
sys.path.insert(0, sys.argv[4])
from monitor.sinks.database import DatabaseSink
from monitor.sinks.spool import Spool
from monitor.store import Store
from tests.test_store import T0, result
store = Store(sys.argv[1])
sink = DatabaseSink(store, spool=Spool(sys.argv[2]), retry_s=3.0)  # its write-back starts in 3 s
print("ready", flush=True)
measured, until = 0, time.monotonic() + float(sys.argv[3])
while time.monotonic() < until:  # new results while the backlog is written back: they join its tail
    measured += 1
    sink.write(result(T0 + timedelta(days=1, seconds=measured), model="live"))
    time.sleep(0.02)
while sink.spooled:
    time.sleep(0.05)
sink.close()
print("measured", measured, flush=True)
"""


@pytest.mark.process
@pytest.mark.slow
def test_a_check_recording_during_a_write_back_is_stored_and_reports_no_outage(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier(), count=2)
    ws.extra["store"] = {"url": f"sqlite:///{tmp_path / 'onnxmon.db'}", "spool_dir": str(tmp_path / "spool")}
    settings = ws.settings()
    with Store(settings.store.url) as store:
        store.upgrade()
    spool = Spool(tmp_path / "spool")
    for second in range(BACKLOG):  # what a daemon spooled during an outage, now over
        spool.append(result(T0 + timedelta(seconds=second), model="clf"))
    daemon = subprocess.Popen(
        [sys.executable, "-c", _DAEMON_SINK, settings.store.url, str(spool.directory), "20", str(ROOT)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert daemon.stdout is not None and daemon.stdout.readline() == "ready\n"
    deadline = time.monotonic() + 60
    while len(spool) < BACKLOG + 5 and time.monotonic() < deadline:  # the daemon measures, its results queue
        time.sleep(0.02)
    recorded = recording.record(settings, [result(T0.replace(year=2026), model="clf")])
    with Store(settings.store.url) as store:
        stored_by_then = [r.started_at.year for r in store.runs("clf", limit=1)]
    out, _ = daemon.communicate(timeout=300)
    assert daemon.returncode == 0
    measured = int(out.split()[-1])
    assert recorded.problem is None, recorded.message()
    assert (recorded.written, recorded.spooled, recorded.lost) == (1, 0, 0)
    assert stored_by_then == [2026], "reported written: it is in the store when check says so"
    assert spool.failed() == [], "a result written back by both processes was set aside as refused"
    with Store(settings.store.url) as store, store.engine.connect() as connection:
        runs = connection.scalar(sa.text("SELECT count(*) FROM runs"))
    assert runs == BACKLOG + measured + 1, "every result stored once"
