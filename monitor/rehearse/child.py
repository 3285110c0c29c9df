"""Run a candidate's command as an untrusted child: bounded output, a hard limit, and its whole session killed.

The candidate interpreter is code we did not write and cannot vet; whatever it does, the rehearsal must
answer in bounded time and memory. So the command runs in a session of its own, and:

- its stdout and stderr are read at once, by ``select``, never past a cap: stdout (the answer) past
  ``stdout_cap`` cuts it (``Ran.cut`` says "printed more than ..."); of stderr, which only serves to say
  why, the last ``STDERR_TAIL`` bytes are kept and past ``stderr_cap`` it is cut too;
- past ``limit_s`` it is cut (``timed_out``);
- once the command exits or is cut, everything left in its session is killed (``SIGKILL``: a child that
  ignores ``SIGTERM`` does not get a say), and so is any process that still holds its stdout or stderr,
  found by the pipe's inode under ``/proc/*/fd`` (a grandchild that called ``setsid`` has left the
  session but still holds the pipe), together with that process's own group;
- what is still buffered in the pipes is read for at most ``GRACE_S`` more, never "until EOF": a holder
  that cannot be killed costs two seconds, not the whole rehearsal.

A process that left the session *and* closed the pipes cannot be found without a cgroup: run a rehearsal
as a Kubernetes Job (docs/kubernetes.md), whose pod ends with it, when the candidate is not trusted at all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

GRACE_S = 2.0
"""After the command exits (or is cut): how long its pipes are read on while its leftovers are killed."""
STDERR_TAIL = 64 << 10
"""How much of the end of stderr is kept (its last line says why a command failed)."""
_POLL_S = 0.05  # how often the exit of the command is looked at while its pipes are quiet
_CHUNK = 1 << 16


@dataclass(frozen=True)
class Ran:
    """What an untrusted command did: its exit status and output, and whether (and why) it was cut."""

    returncode: int | None  # None: it did not exit by itself (cut, then killed)
    stdout: bytes
    stderr: bytes  # the last STDERR_TAIL bytes
    cut: str | None = None  # why it was killed before it finished ("printed more than 8 MiB to stdout")
    timed_out: bool = False
    strays: int = 0  # processes it left behind (in its session or holding its pipes), killed

    def last_line(self) -> str:
        """The last line of stderr (else of stdout), at most 300 characters: what it said before it ended."""
        for stream in (self.stderr, self.stdout):
            lines = stream.decode("utf-8", errors="replace").strip().splitlines()
            if lines:
                return lines[-1].strip()[:300]
        return "no output"


def run(
    command: Sequence[str], *, limit_s: float, stdout_cap: int, stderr_cap: int, env: dict[str, str] | None = None
) -> Ran:
    """Run ``command`` in its own session under the limits above; ``OSError`` when it cannot be started."""
    process = subprocess.Popen(
        list(command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stderr is not None
    pipes = _Pipes(process.stdout.fileno(), process.stderr.fileno(), stdout_cap, stderr_cap)
    deadline = time.monotonic() + limit_s
    cut: str | None = None
    timed_out = False
    try:
        while not _exited(process.pid):
            now = time.monotonic()
            if now >= deadline:
                timed_out, cut = True, f"took over {limit_s:g} s"
                break
            cut = pipes.read(min(deadline - now, _POLL_S))
            if cut is not None:
                break
        strays = _end_session(process, pipes, count=not timed_out and cut is None)
    finally:  # an exception on the way (Ctrl-C): the session and the holders of its pipes go too
        _kill_session(process.pid)
        if pipes.open:
            _kill_holders(pipes.open)
        pipes.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=GRACE_S)
        for handle in (process.stdout, process.stderr):
            handle.close()
    if strays:
        log.warning("the candidate's command left %d process(es) behind; killed: %s", strays, list(command)[:3])
    returncode = None if cut is not None else process.returncode
    return Ran(returncode, pipes.out.bytes(), pipes.err.bytes(), cut, timed_out, strays)


class _Buffer:
    """One pipe's bytes: the head up to ``cap`` (stdout) or the last ``keep`` of up to ``cap`` (stderr)."""

    def __init__(self, cap: int, keep: int | None = None) -> None:
        self.cap, self.keep, self.total = cap, keep, 0
        self.parts: list[bytes] = []
        self.held = 0

    def add(self, chunk: bytes) -> bool:
        """Keep ``chunk``; False once more than ``cap`` bytes came in all."""
        self.total += len(chunk)
        if self.total > self.cap:
            return False
        self.parts.append(chunk)
        self.held += len(chunk)
        if self.keep is not None and self.held > 2 * self.keep:
            joined = b"".join(self.parts)[-self.keep :]
            self.parts, self.held = [joined], len(joined)
        return True

    def bytes(self) -> bytes:
        joined = b"".join(self.parts)
        return joined if self.keep is None else joined[-self.keep :]


class _Pipes:
    """The command's stdout and stderr, read without blocking as long as they are open."""

    def __init__(self, out_fd: int, err_fd: int, stdout_cap: int, stderr_cap: int) -> None:
        self.out, self.err = _Buffer(stdout_cap), _Buffer(stderr_cap, STDERR_TAIL)
        self.names = {out_fd: ("stdout", self.out), err_fd: ("stderr", self.err)}
        self.selector = selectors.DefaultSelector()
        for fd in self.names:
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ)

    @property
    def open(self) -> list[int]:
        return [key.fd for key in self.selector.get_map().values()]

    def read(self, wait_s: float) -> str | None:
        """Read what is there within ``wait_s``; why to cut the command when a cap is passed, else None."""
        for key, _ in self.selector.select(max(wait_s, 0.0)):
            try:
                chunk = os.read(key.fd, _CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self.selector.unregister(key.fd)
                continue
            name, buffer = self.names[key.fd]
            if not buffer.add(chunk):
                return f"printed more than {_size(buffer.cap)} to {name}"
        return None

    def close(self) -> None:
        self.selector.close()


def _end_session(process: subprocess.Popen[bytes], pipes: _Pipes, *, count: bool) -> int:
    """Kill what the command left (its session, the holders of its pipes) while reading what they hold.

    Returns how many processes were left behind after a command that exited by itself (0 when cut)."""
    killed = _kill_session(process.pid)
    grace = time.monotonic() + GRACE_S
    while pipes.open and time.monotonic() < grace:
        if pipes.read(_POLL_S) is not None:
            break  # a cap passed while draining: what was kept is all there is
        if pipes.open:
            killed |= _kill_holders(pipes.open)
    return len(killed) if count else 0


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited, without reaping it (its pid stays its session's id until it is reaped)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _kill_session(sid: int) -> set[int]:
    """SIGKILL every process of session ``sid`` (every process group a command started in it)."""
    _kill_group(sid)
    found = {pid for pid, (_, session) in _processes().items() if session == sid and pid != sid}
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return found


def _kill_holders(fds: Sequence[int]) -> set[int]:
    """SIGKILL every other process that holds one of our pipes ``fds`` (by inode), and its process group."""
    inodes = {f"pipe:[{os.fstat(fd).st_ino}]" for fd in fds}
    me, my_group = os.getpid(), os.getpgrp()
    found: set[int] = set()
    for pid, (group, _) in _processes().items():
        if pid == me or not _holds(pid, inodes):
            continue
        found.add(pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        if group not in (my_group, 0):
            _kill_group(group)
    return found


def _holds(pid: int, inodes: set[str]) -> bool:
    """Whether ``pid`` holds the *write* end of one of the pipes (a fork of ours holding a read end is no stray)."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for name in names:
        with contextlib.suppress(OSError, ValueError):
            if os.readlink(f"/proc/{pid}/fd/{name}") in inodes:
                info = Path(f"/proc/{pid}/fdinfo/{name}").read_text()
                flags = next((int(line.split()[1], 8) for line in info.splitlines() if line.startswith("flags:")), 0)
                if flags & os.O_ACCMODE == os.O_WRONLY:
                    return True
    return False


def _processes() -> dict[int, tuple[int, int]]:
    """Every visible process: pid -> (process group, session), from ``/proc`` (empty where there is none)."""
    found: dict[int, tuple[int, int]] = {}
    with contextlib.suppress(OSError):
        entries = [name for name in os.listdir("/proc") if name.isdigit()]
        for name in entries:
            try:
                stat = Path(f"/proc/{name}/stat").read_bytes()
            except OSError:
                continue
            # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses, so after the last ')'
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) >= 4:
                found[int(name)] = (int(fields[2]), int(fields[3]))
    return found


def _size(count: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale} {unit}"
    return f"{count} bytes"
