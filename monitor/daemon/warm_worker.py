"""A warm check worker's own side: isolate itself, then answer one check after another over its pipe.

``daemon/warm.py`` is the daemon's side (the pool: which worker, when to start and stop one, the
request and the wait). Here, inside the worker, ``serve`` keeps one ``runtime.kept.KeptModels`` (the
session, the files, the comparison's memo) and the plan of its first check (a changed plan starts
another worker), and sends each check's payload back with its own memory figures, which the pool
reads to recycle a worker near its cap.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os

from monitor.config.plan import CheckPlan
from monitor.daemon import isolate
from monitor.results import CheckResult
from monitor.runtime.kept import KeptModels


def serve(
    conn: multiprocessing.connection.Connection, owner: int, memory_limit_bytes: int | None, rehash_every: int
) -> None:
    """The worker's loop: isolate itself as every check child does, then answer checks until told to stop."""
    isolate.prepare_child(owner, memory_limit_bytes)
    models = KeptModels(rehash_every=rehash_every)
    checks = 0
    kept_plan: CheckPlan | None = None
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the daemon closed its end
        if message is None:
            return
        job, sent = message
        kept_plan = sent if sent is not None else kept_plan  # None: the plan of the worker's first check
        try:
            if kept_plan is None:
                raise RuntimeError("asked to check with no plan: the first check must send one")
            payload = dict(job(kept_plan, models=models))
            checks += 1
            result = payload.get("result")
            warm = result.details.get("warm") if isinstance(result, CheckResult) else None
            if isinstance(warm, dict):  # the result is this worker's own, fresh value: its note is filled in place
                warm.update(worker_pid=os.getpid(), worker_checks=checks)
            payload["worker"] = memory()
            conn.send(("ok", payload))
        except BaseException as exc:  # report, then die: the parent records a crash and starts afresh
            with contextlib.suppress(Exception):
                conn.send(("raised", f"{type(exc).__name__}: {exc}"[:1000]))
            return


def memory(statm: str = "/proc/self/statm") -> dict[str, int]:
    """This process's address space and resident set, in bytes (what RLIMIT_AS caps, and what is in RAM).

    From ``statm``'s first two fields (pages; ``VmSize`` and ``VmRSS`` of ``status``): one short read,
    ~10 us, where parsing ``status`` took ~70 us after every check.
    """
    try:
        fd = os.open(statm, os.O_RDONLY)
        try:
            fields = os.read(fd, 256).split()
        finally:
            os.close(fd)
        page = os.sysconf("SC_PAGE_SIZE")
        return {"address_space_bytes": int(fields[0]) * page, "rss_bytes": int(fields[1]) * page}
    except (OSError, ValueError, IndexError):
        return {}
