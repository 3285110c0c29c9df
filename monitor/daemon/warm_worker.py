"""A check worker's own side: isolate itself, then answer one check after another over its pipe.

``daemon/warm.py`` is the daemon's side (the pool: which worker, when to start and stop one, the
request and the wait). Here, inside the worker, ``serve`` keeps one ``runtime.worker_state.WorkerState``
(the session, the model file's digests, the environment's constant parts) and answers each
``(job, plan)`` with the job's payload: the ``CheckResult`` as it is, its ``details.worker`` note
(this process, its checks so far, whether this check built the session or hashed the model file),
and the process's memory figures, which the pool reads to recycle a worker near its cap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing.connection
import os
from pathlib import Path

from monitor.daemon import isolate
from monitor.details import WorkerNote
from monitor.results import CheckResult
from monitor.runtime import footprint
from monitor.runtime.worker_state import WorkerState


def serve(conn: multiprocessing.connection.Connection, owner: int, memory_limit_bytes: int | None) -> None:
    """The worker's loop: isolate itself as every check child does, then answer checks until told to stop."""
    isolate.prepare_child(owner, memory_limit_bytes)
    state = WorkerState()
    checks = 0
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the daemon closed its end
        if message is None:
            return
        job, plan = message
        try:
            builds, hashed = state.session_builds, state.digests.computed
            payload = dict(job(plan, worker=state))
            checks += 1
            result = payload.get("result")
            if isinstance(result, CheckResult):
                note: WorkerNote = {
                    "pid": os.getpid(),
                    "checks": checks,
                    "session_built": state.session_builds > builds,
                    "model_hashed": state.digests.computed > hashed,
                }
                payload["result"] = dataclasses.replace(result, details={**result.details, "worker": note})
            payload["memory"] = memory()
            conn.send(("ok", payload))
        except BaseException as exc:  # report, then die: the parent records a crash and starts afresh
            refused = ""  # under a cap below the process's own footprint, say so (a second refusal here says nothing)
            with contextlib.suppress(Exception):
                refused = footprint.cap_note(exc)
            with contextlib.suppress(Exception):
                conn.send(("raised", f"{type(exc).__name__}: {exc}{refused}"[:1000]))
            return


def memory(statm: Path = Path("/proc/self/statm")) -> dict[str, int]:
    """This process's address space and resident set, in bytes (what RLIMIT_AS caps, and what is in RAM)."""
    try:
        fields = statm.read_text().split()
        page = os.sysconf("SC_PAGE_SIZE")
        return {"address_space_bytes": int(fields[0]) * page, "rss_bytes": int(fields[1]) * page}
    except (OSError, ValueError, IndexError):
        return {}
