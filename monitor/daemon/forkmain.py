"""Imported by the forkserver (``isolate._PRELOAD``): the main script, imported there once, so no child re-imports it.

A forkserver child rebuilds its parent's ``__main__`` before it runs anything (multiprocessing's
``spawn.prepare``): it imports the main script again unless the process it was forked from already
holds it. CPython 3.11's forkserver means to preload it when ``"__main__"`` is in the preload list,
but looks for the key ``main_path`` where ``spawn.get_preparation_data`` writes
``init_main_from_path``, so it never does. Every isolated child (a check, a diagnosis experiment)
then paid the main script's imports again: for ``onnxmon`` the whole CLI, 0.7-2 s a child on a
loaded machine, 94 % of a diagnosis's wall time (bench/bench_diagnose.py). ``start_forkserver`` names
the script in ``ENV`` while the forkserver starts; this module imports it as multiprocessing would
(``__mp_main__``, its ``if __name__ == "__main__"`` block not run). A script that fails to import
here is left to the children, as before.

The forkserver also ignores SIGTERM (``MARK``). It sits in its owner's process group, so a SIGTERM
to the group (systemd's default ``KillMode=control-group``, supervisord's ``stopasgroup``) killed it,
and every running check with it in the owner's eyes: a ``Process`` started through the forkserver
learns whether its child lives from the forkserver, and read a dead one as the child's exit, status
255, a ``crash``. The owner handles SIGTERM itself (the daemon lets the check in flight finish); the
forkserver still exits with its owner (multiprocessing's liveness pipe), and its children, the check
workers, move into groups of their own before they take SIGTERM's default back
(``isolate.prepare_child``).
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import multiprocessing.spawn
import os
import signal

ENV = "ONNXMON_FORKSERVER_MAIN"
MARK = "ONNXMON_FORKSERVER"  # set while the forkserver starts: the process importing this module with it is it


def main_path() -> str | None:
    """The main script a child would re-import (None under ``python -m`` or an interactive session)."""
    path = multiprocessing.spawn.get_preparation_data("onnxmon").get("init_main_from_path")
    return str(path) if path else None


def start_forkserver() -> None:
    """Start multiprocessing's forkserver now, with the main script named for ``_preload`` (its environment only)."""
    import multiprocessing.forkserver

    main = main_path()
    if main is not None:
        os.environ[ENV] = main
    os.environ[MARK] = "1"
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        os.environ.pop(ENV, None)  # the forkserver has its copy: no other process inherits it
        os.environ.pop(MARK, None)


def _preload() -> None:
    if os.environ.pop(MARK, None):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM is for the owner (see above)
    path = os.environ.pop(ENV, None)
    if not path or not os.path.isfile(path):
        return
    current = multiprocessing.process.current_process()
    if getattr(current, "_inheriting", False):
        return  # a child rebuilding its parent's __main__ (which imported this module): not the forkserver
    current._inheriting = True  # type: ignore[attr-defined]  # what spawn.prepare sets around the same import
    try:
        with contextlib.suppress(Exception):
            multiprocessing.spawn.import_main_path(path)
    finally:
        del current._inheriting  # type: ignore[attr-defined]


_preload()
