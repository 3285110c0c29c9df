"""Undoing a capture or a promotion on disk when the store then refuses to record it.

A capture or a promotion is written to disk first and then recorded in the store; when the store
fails in between (an outage after the readiness check), the command must leave nothing behind,
not an ACTIVE baseline the store never heard of. ``active_state`` notes what ``restore`` puts back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from monitor.files.baselines import ACTIVE_FILE, PROMOTIONS_FILE, active_id, not_written


@dataclass(frozen=True)
class ActiveState:
    """A model's ``ACTIVE`` file and promotion log at one moment: what ``restore`` puts back."""

    model_dir: Path
    active: str | None
    log_size: int | None  # None: no promotion log yet
    existed: bool


def active_state(root: Path, model: str) -> ActiveState:
    """What ``model``'s ACTIVE and promotion log are now."""
    model_dir = Path(root) / model
    log = model_dir / PROMOTIONS_FILE
    size = log.stat().st_size if log.is_file() else None
    return ActiveState(model_dir, active_id(root, model), size, model_dir.is_dir())


def restore(state: ActiveState, *, drop: Path | None = None) -> None:
    """Put ACTIVE and the promotion log back as ``state`` saw them; ``drop``: a new baseline to remove too.

    ``NotWritten`` when ACTIVE cannot be rewritten (a full disk): the message says what to run.
    """
    if drop is not None and drop.parent == state.model_dir:
        shutil.rmtree(drop, ignore_errors=True)
    active = state.model_dir / ACTIVE_FILE
    if state.active is None:
        active.unlink(missing_ok=True)
    else:
        temp = state.model_dir / f".{ACTIVE_FILE}.{os.getpid()}.tmp"
        try:
            temp.write_text(state.active + "\n", encoding="utf-8")
            os.replace(temp, active)
        except OSError as exc:
            if os.path.lexists(temp):
                with contextlib.suppress(OSError):
                    temp.unlink()
            again = f"`onnxmon baseline promote {state.active}` once it can be written"
            raise not_written(active, exc, f"the store did not record the change; to put it back, run {again}") from exc
    log = state.model_dir / PROMOTIONS_FILE
    if state.log_size is None:
        log.unlink(missing_ok=True)
    elif log.is_file():
        os.truncate(log, state.log_size)
    if not state.existed:
        with contextlib.suppress(OSError):  # only when nothing else is left in it
            state.model_dir.rmdir()
