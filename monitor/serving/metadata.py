"""The serving stack as environment fields: what the server says of itself and of the model.

A check of a served model records, beside the local snapshot, the server's ``/v2`` metadata (name,
version, extensions), the model's (platform, versions) and the image tag the user deploys, as stable
``serving.*`` fields: a Triton or KServe upgrade is then an environment change with its fields named
(``serving.server.version 2.44.0 -> 2.46.0``), in the diff, the fingerprint and the attribution. The
address is recorded as volatile (a server moved behind another address computes the same numbers).
A server that cannot say is ``serving.error`` (volatile), never a failed capture.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.config.endpoint_schema import EndpointConfig
from monitor.errors import EndpointError
from monitor.runtime import envsnap
from monitor.runtime.gpu import Entries, JsonValue
from monitor.serving.client import EndpointRunner


def entries(cfg: EndpointConfig, metadata: Mapping[str, Any] | None, error: str | None = None) -> Entries:
    """The ``serving.*`` fields of ``cfg`` and the metadata its server gave (None: ``error`` says why)."""
    found: Entries = {
        "serving.protocol": (cfg.protocol, True),
        "serving.model.name": (cfg.model, True),
        "serving.model.requested_version": (cfg.version or None, True),
        "serving.image_tag": (cfg.image_tag, True),
        "serving.url": (cfg.url, False),
    }
    if metadata is None:
        found["serving.error"] = (error or "no metadata", False)
        return found
    server, model = metadata.get("server") or {}, metadata.get("model") or {}
    found["serving.server.name"] = (_scalar(server.get("name")), True)
    found["serving.server.version"] = (_scalar(server.get("version")), True)
    found["serving.server.extensions"] = (_strings(server.get("extensions")), True)
    found["serving.model.platform"] = (_scalar(model.get("platform")) or None, True)
    found["serving.model.versions"] = (_strings(model.get("versions")), True)
    return found


def probe(runner: EndpointRunner) -> Entries:
    """The ``serving.*`` fields of ``runner``'s server, asked now; never raises."""
    try:
        return entries(runner.cfg, runner.server_metadata())
    except EndpointError as exc:
        return entries(runner.cfg, None, f"{exc.code}: {exc}")


def server_fields(cfg: EndpointConfig) -> Entries:
    """The ``serving.*`` fields of the server ``cfg`` names (a baseline's capture records them); never raises."""
    try:
        runner = EndpointRunner(cfg, {})
    except EndpointError as exc:
        return entries(cfg, None, f"{exc.code}: {exc}")
    try:
        return probe(runner)
    finally:
        runner.close()


def with_server(snapshot: envsnap.EnvSnapshot, found: Entries) -> envsnap.EnvSnapshot:
    """``snapshot`` with the serving fields ``found`` added."""
    fields = dict(snapshot.fields)
    fields.update({name: envsnap.Field(value, stable) for name, (value, stable) in found.items()})
    return envsnap.EnvSnapshot(fields=fields, captured_at=snapshot.captured_at)


def _scalar(value: Any) -> JsonValue:
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)


def _strings(value: Any) -> JsonValue:
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return sorted(str(v) for v in value)
    return [str(value)]
