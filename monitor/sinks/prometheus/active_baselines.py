"""Which baseline is active for each model, as the metrics read it from the baselines directory.

``ACTIVE`` is read again whenever its stat stamp moves (a promotion replaces the file: a new inode;
an edit changes its size or times), so a promotion is seen at the next scrape. A baseline's
metadata is kept by its id: baselines are write-once, a new capture or promotion is a new id.
A broken ``ACTIVE`` file or ``baseline.json`` reads as "no baseline" and is logged, never raised
into a scrape.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from monitor.files import baseline_meta, baselines, stamped

log = logging.getLogger(__name__)


class ActiveBaselines:
    """The active baseline's metadata per (baselines directory, model)."""

    def __init__(self) -> None:
        self._meta: dict[str, baseline_meta.BaselineMeta] = {}
        self._ids: dict[tuple[str, str], tuple[stamped.Stamp | None, str | None]] = {}

    def meta(self, root: Path, model: str) -> baseline_meta.BaselineMeta | None:
        """The active baseline's metadata, or None when there is none or it cannot be read."""
        try:
            baseline_id = self._active_id(root, model)
            if baseline_id is None:
                return None
            if baseline_id not in self._meta:
                found = baselines.active(root, model)
                if found is None:
                    return None
                self._meta[baseline_id] = found.meta
            return self._meta[baseline_id]
        except Exception as exc:  # a broken ACTIVE file or baseline.json: reported as "no baseline"
            log.warning("active baseline of %r unreadable: %s", model, exc)
            return None

    def _active_id(self, root: Path, model: str) -> str | None:
        """``baselines.active_id``, read again only when the ``ACTIVE`` file's stat stamp changed."""
        path = os.path.join(root, model, baselines.ACTIVE_FILE)
        signature = stamped.stamp([path])
        cached = self._ids.get((str(root), model))
        if signature is not None and cached is not None and cached[0] == signature:
            return cached[1]
        baseline_id = baselines.active_id(root, model)
        self._ids[(str(root), model)] = (signature, baseline_id)
        return baseline_id
