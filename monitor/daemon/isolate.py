"""Run one check in a child process with a hard timeout, so nothing a model does can hurt the daemon.

The child is forked from a *forkserver* that has already imported onnxmon and ONNX Runtime
(cheap children, no per-check interpreter start), and the first thing it does is move into
its own process group. On timeout the whole group is killed with SIGKILL — grandchildren
included — and the outcome is ``timeout``. A child that dies without answering (segfault,
OOM kill, ``os._exit``) is a ``crash`` with the signal or exit status named. Either way the
caller gets a value, never an exception.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import resource
import select
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from monitor.daemon import forkmain
from monitor.runtime import footprint

ChildFunction = Callable[..., Mapping[str, Any]]
Kind = Literal["ok", "timeout", "crash", "cancelled"]

POLL_S = 0.5  # how often a waiting parent looks at the child's liveness and at ``cancel``
# forkmain first: the main script, so children do not import it again (see there)
_PRELOAD = ["monitor.daemon.forkmain", "monitor.check", "monitor.runtime.session", "monitor.diagnose.replay", "numpy"]
_PRELOAD.append("onnxruntime")
_context: multiprocessing.context.BaseContext | None = None


@dataclass(frozen=True)
class Outcome:
    """What became of the child: its returned value, or why there is none."""

    kind: Kind
    value: Mapping[str, Any] | None
    detail: str
    seconds: float
    exit_code: int | None = None


def context() -> multiprocessing.context.BaseContext:
    """The shared forkserver context (created lazily: importing this module starts nothing)."""
    global _context
    if _context is None:
        ctx: multiprocessing.context.BaseContext
        try:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(_PRELOAD)
            forkmain.start_forkserver()
        except ValueError:  # platforms without fork: a fresh interpreter per check
            ctx = multiprocessing.get_context("spawn")
        _context = ctx
    return _context


def run(
    function: ChildFunction,
    *args: Any,
    timeout_s: float,
    memory_limit_bytes: int | None = None,
    cancel: threading.Event | None = None,
) -> Outcome:
    """Call ``function(*args)`` in a child; kill its process group after ``timeout_s``.

    ``function`` must be importable (module-level) and return a JSON-like mapping.
    ``memory_limit_bytes`` caps the child's address space (RLIMIT_AS), turning a leak into
    a clean crash instead of an OOM kill that may take the node's other pods with it.
    ``cancel`` set (a daemon stopping) kills the group within ``POLL_S`` too: outcome ``cancelled``.
    """
    ctx = context()
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(  # type: ignore[attr-defined]
        target=_child, args=(sender, function, args, memory_limit_bytes, os.getpid()), daemon=True
    )
    began = time.monotonic()
    process.start()
    sender.close()  # the child holds the only writer: EOF on the reader means it died
    try:
        return _await(process, receiver, began, timeout_s, cancel, memory_limit_bytes)
    finally:
        receiver.close()
        process.join(timeout=5)
        with contextlib.suppress(Exception):
            process.close()


def _await(
    process: Any,
    receiver: multiprocessing.connection.Connection,
    began: float,
    timeout_s: float,
    cancel: threading.Event | None,
    memory_limit_bytes: int | None = None,
) -> Outcome:
    deadline = began + timeout_s
    message = receive(process, receiver, deadline, cancel)
    if message == "timeout":
        kill_group(process)
        return Outcome("timeout", None, timeout_detail(timeout_s), timeout_s)
    if message == "cancelled":
        kill_group(process)
        return Outcome("cancelled", None, "cancelled: the daemon is stopping", time.monotonic() - began)
    elapsed = time.monotonic() - began
    if message is None:
        process.join(timeout=5)
        detail = describe_exit(process.exitcode, memory_limit_bytes)
        return Outcome("crash", None, detail, elapsed, process.exitcode)
    status, payload = message
    process.join(timeout=max(1.0, deadline - time.monotonic()))
    if process.is_alive():  # answered but hangs on exit (a stuck ORT thread pool): reap it
        kill_group(process)
    if status == "ok":
        return Outcome("ok", payload, "", elapsed, process.exitcode)
    return Outcome("crash", None, f"child raised {payload}", elapsed, process.exitcode)


def receive(
    process: Any,
    receiver: multiprocessing.connection.Connection,
    deadline: float,
    cancel: threading.Event | None = None,
) -> tuple[str, Any] | Literal["timeout", "cancelled"] | None:
    """The child's answer by ``deadline`` (monotonic); ``"timeout"`` past it, None when the child died mute.

    ``"cancelled"`` once ``cancel`` is set (looked at every ``POLL_S``).
    """
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout"
        if cancel is not None and cancel.is_set():
            return "cancelled"
        if receiver.poll(min(left, POLL_S)):
            try:
                message: tuple[str, Any] = receiver.recv()
            except (EOFError, OSError):
                return None
            return message
        if not process.is_alive():
            # The child may have answered and exited between poll() and here: drain before
            # concluding it died without a result.
            if receiver.poll(0):
                continue
            return None


def timeout_detail(timeout_s: float) -> str:
    return f"check exceeded its timeout of {timeout_s:g}s; killed"


def _child(
    sender: multiprocessing.connection.Connection,
    function: ChildFunction,
    args: tuple[Any, ...],
    memory_limit_bytes: int | None,
    owner: int,
) -> None:
    prepare_child(owner, memory_limit_bytes)
    try:
        result = function(*args)
        sender.send(("ok", dict(result)))
    except BaseException as exc:  # report, then die: the parent records a crash
        note = ""  # under a cap below the process's own footprint, say so (a second refusal here says nothing)
        with contextlib.suppress(Exception):
            note = footprint.cap_note(exc)
        with contextlib.suppress(Exception):
            sender.send(("raised", f"{type(exc).__name__}: {exc}{note}"[:1000]))
    finally:
        sender.close()


def prepare_child(owner: int, memory_limit_bytes: int | None) -> None:
    """What every check child does first: its own process group, death with ``owner``, default signals, the cap."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # own process group: the parent kills us and our children together
    _die_with(owner)
    # SIGTERM's default back only now, out of the owner's group: the forkserver ignores it (forkmain), so a
    # SIGTERM sent to the owner's group as this child starts does not reach it either
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if memory_limit_bytes:
        footprint.note()  # a cap below it fails every check: the reason then says so (runtime/footprint.py)
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))


def _die_with(owner: int) -> None:
    """Kill this child's process group as soon as ``owner`` (the daemon or CLI that ran it) exits.

    The child's parent is multiprocessing's forkserver, which outlives a SIGKILLed daemon while any
    child still holds its liveness pipe, so ``PR_SET_PDEATHSIG`` would never fire. Instead a thread
    waits on a pidfd of the owner (a poll of its pid where pidfds are missing) and takes the group
    down, so no check runs on past its hard cut with nobody left to enforce it.
    """

    def watch() -> None:
        try:
            handle = os.pidfd_open(owner)
        except ProcessLookupError:
            handle = None  # already gone
        except (AttributeError, OSError):
            handle = -1  # no pidfds here: poll
        if handle is not None and handle >= 0:
            select.select([handle], [], [])
        elif handle == -1:
            while _exists(owner):
                time.sleep(0.5)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="onnxmon-owner-watch", daemon=True).start()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(process: Any) -> None:
    """SIGKILL the child's whole process group (grandchildren included) and reap the child."""
    pid = process.pid
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        # Not yet (or no longer) a group leader: kill the child itself.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.join(timeout=5)


def describe_exit(exit_code: int | None, memory_limit_bytes: int | None = None) -> str:
    """How a child ended without a result; under a memory cap, what the cap may have to do with it."""
    if exit_code is None:
        return "child vanished without an exit status"
    if exit_code < 0:
        name = signal.Signals(-exit_code).name
        hint = " (out-of-memory killer?)" if name == "SIGKILL" else ""
        return f"child killed by {name}{hint}{footprint.signal_note(name, memory_limit_bytes)}"
    return f"child exited with status {exit_code} without a result"
