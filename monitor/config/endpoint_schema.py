"""The ``models[].endpoint`` section: a served copy of the model, spoken to over the Open Inference Protocol.

A model that names an endpoint is checked where it is served (KServe, Triton, Seldon through
Triton): the benchmark set is replayed through the endpoint as well as through the local session
built from ``path`` (the control that splits a drift into ``serving`` and ``model``). Kept apart
from ``schema.py`` so the section merges on its own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from monitor.config import fields
from monitor.config.fields import MAX_SHORT, Duration, StrictModel

# host:port, or an http(s):// URL for REST (a path prefix allowed); never credentials in the URL.
_HOSTPORT = re.compile(r"^(?:https?://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::\d{1,5})?(?:/[A-Za-z0-9._~/-]*)?$")


class EndpointConfig(StrictModel):
    """An Open Inference Protocol (KServe v2) endpoint serving this model."""

    protocol: Literal["v2-grpc", "v2-rest"] = Field(
        description="v2-rest: HTTP/JSON with the binary tensor extension (nothing rounded); v2-grpc: gRPC with"
        " raw_input_contents / raw_output_contents."
    )
    url: str = Field(
        description="host:port of the server (v2-rest also takes http:// or https://host:port); no credentials here:"
        " use token_file."
    )
    model: str = Field(min_length=1, max_length=256, description="The model's name on the server.")
    version: str = Field(default="", max_length=64, description="The model version to ask for; empty: the server's.")
    token_file: Path | None = Field(
        default=None,
        description="File holding a bearer token sent as 'Authorization: Bearer ...' (a mounted secret); relative"
        " to the config file.",
    )
    tls: bool = Field(default=False, description="Speak TLS (https / gRPC over TLS with the system's CA roots).")
    timeout_s: Duration = Field(
        default=30.0,
        gt=0,
        le=MAX_SHORT,
        description="Longest wait for one request (a slower answer: endpoint_timeout).",
    )
    image_tag: str | None = Field(
        default=None,
        max_length=256,
        description="The server's image tag as you deploy it (e.g. nvcr.io/nvidia/tritonserver:24.05-py3); recorded"
        " in the environment so an upgrade is a named change.",
    )
    cache_probe: bool = Field(
        default=True,
        description="Send a nonce-varied twin of one sample to detect a response cache answering instead of the"
        " model (reason endpoint_cached).",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        if "@" in url or fields.has_control_characters(url) or not _HOSTPORT.match(url):
            raise ValueError(
                "expected host:port (or http(s)://host:port for v2-rest), without credentials: e.g. 127.0.0.1:8001"
            )
        return url

    @field_validator("model", "version")
    @classmethod
    def _name(cls, value: str) -> str:
        if value and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value):
            raise ValueError("letters, digits, '.', '_' and '-' only (it becomes part of a URL path)")
        return value

    @model_validator(mode="after")
    def _scheme_fits(self) -> EndpointConfig:
        if self.protocol == "v2-grpc" and "://" in self.url:
            raise ValueError("url: v2-grpc takes host:port, not a URL with a scheme (set tls: true for TLS)")
        return self


ENDPOINT_FIELD = Field(
    default=None,
    description="Check the model where it is served (Open Inference Protocol: KServe, Triton); the local file"
    " stays the control that tells a serving drift from a model drift (docs/serving.md).",
)
