"""API-triggered checks share the daemon's worker slots (issue 17, item 10).

The outside attack sent 40 concurrent ``POST /api/v1/models/{name}/check`` and got 27 check
children at once, past ``daemon.workers``, with ``/healthz`` waiting 3.6 s. Now a request takes a
worker slot or is answered 429 with ``Retry-After``, so at most ``daemon.workers`` children run.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests import modelzoo
from tests.serving import Served, check_children, free_port, two_models
from tests.workspace import Workspace

TOKEN = "burst-token-0123456789"
WORKERS = 2


def post(port: int, path: str) -> tuple[int, str | None]:
    """Status and ``Retry-After`` of a POST with the token."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method="POST", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.headers.get("Retry-After")
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Retry-After")


@pytest.mark.slow
def test_a_burst_of_api_checks_never_runs_more_children_than_daemon_workers(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    two_models(ws, timeout="30s")
    ws.replace_model("spin", modelzoo.hang(iterations=200_000))  # about a second per check
    # No scheduled run during the burst (first runs spread over a day), so only the burst takes slots.
    ws.extra["daemon"].update(workers=WORKERS, startup_spread="1d")
    ws.extra["api"] = {"token": TOKEN}
    ws.write()
    served = Served(ws, free_port())
    statuses: Counter[int] = Counter()
    retry_after: set[str] = set()
    peak = 0
    healthz: list[int] = []
    try:
        done = threading.Event()

        def fire() -> None:
            status, retry = post(served.port, "/api/v1/models/spin/check")
            statuses[status] += 1
            if status == 429:
                retry_after.add(retry or "")

        threads = [threading.Thread(target=fire) for _ in range(40)]
        for thread in threads:
            thread.start()

        def watch() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, len(check_children(served.process.pid)))
                healthz.append(served.get("/healthz")[0])

        watcher = threading.Thread(target=watch)
        watcher.start()
        for thread in threads:
            thread.join(180)
        done.set()
        watcher.join(30)
    finally:
        assert served.stop() == 0
    assert sum(statuses.values()) == 40
    assert set(statuses) <= {200, 429}, statuses
    assert statuses[200] >= WORKERS and statuses[429] > 0, statuses
    assert retry_after == {"5"}
    assert 1 <= peak <= WORKERS, f"{peak} check children at once with daemon.workers={WORKERS}"
    assert healthz and set(healthz) == {200}
