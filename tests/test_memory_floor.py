"""A memory cap below what a check process needs before it checks anything (issue 30, partial).

``daemon.memory_limit_mb: 300`` validates, but a check child starts at 385 to 520 MB of address space
(Python, numpy, ONNX Runtime), so every check was ``internal_error`` "MemoryError" and nothing said
why. The reason now says the cap is below the process's own footprint, with both numbers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.daemon.root import Daemon
from monitor.results import Verdict
from monitor.store import Store
from tests.serving import two_models
from tests.workspace import Workspace


@pytest.mark.parametrize("worker", ["warm", "fresh"])
def test_a_cap_below_the_check_process_footprint_says_so_in_the_reason(tmp_path: Path, worker: str) -> None:
    ws = Workspace(tmp_path)
    two_models(ws, timeout="60s")  # a loaded machine starts a child slowly; a 3 s timeout hid the MemoryError
    ws.extra["daemon"].update(memory_limit_mb=300, worker=worker)
    settings = ws.settings()
    with Store(settings.store.url) as store:
        store.upgrade()
        daemon = Daemon(settings, store=store)
        try:
            result = daemon.run_now("clf")
        finally:
            daemon.stop()
    assert result.verdict is Verdict.ERROR
    detail = " ".join(r.detail for r in result.reasons)
    assert "below the check process's own footprint" in detail and "memory_limit_mb" in detail, result.reasons
    assert "300 MB" in detail, detail
