"""A baseline's metadata (``baseline.json``): what produced it, on what, from which inputs, and where it is made.

One constructor (``new_meta``) for every path that captures a baseline (a check's capture, a PyTorch
reference), so ``created_at`` has one form, RFC 3339 UTC; ``created_seconds`` reads either form older
files hold ("...Z", "+00:00") so baselines sort by time, not by string.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from monitor import jsonsafe, shapes
from monitor.errors import BaselineError
from monitor.results import fingerprint_of

Source = Literal["captured", "imported", "reference"]


@dataclass(frozen=True)
class BaselineMeta:
    """Everything needed to trust a baseline: what produced it, on what, from which inputs."""

    id: str
    model: str
    created_at: str
    source: Source
    model_sha256: str
    model_md5: str = ""
    external_data: Mapping[str, str] = field(default_factory=dict)
    benchset: str = ""
    benchset_version: int = 0
    benchset_sha256: str = ""
    sample_count: int = 0
    outputs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # name -> {dtype, index}
    files: Mapping[str, str] = field(default_factory=dict)  # relative path -> sha256
    session: Mapping[str, Any] = field(default_factory=dict)  # providers asked/effective, options
    environment: Mapping[str, Any] = field(default_factory=dict)
    intermediates: Mapping[str, Any] = field(default_factory=dict)  # {samples: [...], tensors: {...}}
    note: str = ""

    @property
    def environment_fingerprint(self) -> str | None:
        return fingerprint_of(self.environment)

    def store_record(self, *, path: Path | str | None, active: bool) -> dict[str, Any]:
        """The metadata the history store mirrors (``Store.record_baseline``); tensors stay on disk."""
        return {
            "baseline_id": self.id,
            "model": self.model,
            "created_at": self.created_at,
            "source": self.source,
            "model_sha256": self.model_sha256,
            "benchset": self.benchset,
            "benchset_sha256": self.benchset_sha256,
            "environment": dict(self.environment) or None,
            "path": str(path) if path is not None else None,
            "active": active,
        }

    def to_dict(self) -> dict[str, Any]:
        """Every field, in order (``monitor.shapes``): what ``meta.json`` holds."""
        return shapes.to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str) -> BaselineMeta:
        try:
            return cls(**{k: data[k] for k in data if k in cls.__dataclass_fields__})
        except TypeError as exc:
            raise BaselineError(f"{where}: malformed baseline metadata: {exc}") from None


def new_meta(
    model: str,
    model_path: Path,
    bench: Any,
    *,
    source: Source,
    session: Mapping[str, Any],
    environment: Mapping[str, Any],
    note: str = "",
    now: dt.datetime | None = None,
) -> BaselineMeta:
    """The metadata of a baseline about to be written (``id`` is given at commit): the one place it is made.

    ``bench`` is the ``benchsets.Benchset`` it was run on (name, version, sha256); ``created_at`` is
    RFC 3339 UTC (``jsonsafe.timestamp``) whichever path captured it (a check's capture, a PyTorch reference).
    """
    from monitor.files import modelfile

    identity = modelfile.identify(model_path)
    return BaselineMeta(
        id="",
        model=model,
        created_at=jsonsafe.timestamp(now or dt.datetime.now(dt.UTC)),
        source=source,
        model_sha256=identity.sha256,
        model_md5=identity.md5,
        external_data=identity.external_data,
        benchset=bench.name,
        benchset_version=bench.version,
        benchset_sha256=bench.sha256,
        session=dict(session),
        environment=dict(environment),
        note=note,
    )


def created_seconds(value: str) -> float:
    """``created_at`` as seconds: "…Z" and "+00:00" (older references) sort by the time they say."""
    try:
        return jsonsafe.epoch(value)
    except ValueError:
        return 0.0
