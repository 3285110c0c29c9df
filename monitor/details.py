"""The types of what a check result carries beside its numbers: ``CheckResult.details`` and ``.environment``.

Both are JSON objects on every shape of a run (the spool, the store, ``check --json``, the API), and both
used to be ``Mapping[str, Any]``: a non-finite float and the string that spells it (``"Infinity"``) were
written alike, so a reader either turned every such string into a float or none. Typed here, a reader
turns a spelling back into a float exactly where the type says float (``monitor.shapes``), and text
stays text everywhere else.

- ``Details``: the keys a check writes, each with its type. The plain ones (``session``, ``model``,
  ``env_diff``, ``worker``, ...) are typed to their leaves. The *documents* (``model_diff``, ``lint``,
  ``batch_invariance``, ``localization``, ``diagnosis``) are ``Document``: JSON objects their own
  modules define (``ModelDiff.to_dict``, ``LocalizationReport.to_dict``, ``Diagnosis.to_dict``, ...),
  read back as written. A non-finite float in a document is its ``monitor.jsonsafe`` spelling once
  written; the readers of a document turn the floats they use back with ``float()``, as they always did
  for runs read from the store.
- ``EnvironmentSnapshot``: ``EnvSnapshot.to_dict``; its field values are read back as written.

Every key may be absent (an error result carries none), and a key this version does not know (a newer
version's, or a document of older tests) is kept as it is, untouched, on every shape.

Standard library only: it is shared vocabulary, like ``monitor.results`` which uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

Document = Mapping[str, Any]
"""A JSON object that its own module defines, carried in ``Details`` and read back as written."""


class SessionDetails(TypedDict, total=False):
    """``runtime.session.SessionInfo.to_dict``: what the ONNX Runtime session really is."""

    requested: list[str]
    effective: list[str]
    fallback: list[str]
    provider_options: dict[str, dict[str, str]]
    placement: dict[str, int]
    load_seconds: float


class ModelDetails(TypedDict, total=False):
    """``files.modelfile.ModelIdentity.to_dict``: the model file's hashes and headline facts."""

    path: str
    sha256: str
    md5: str
    size_bytes: int
    external_data: dict[str, str]
    opset: int | None
    ir_version: int | None
    producer: str


class EnvChange(TypedDict, total=False):
    """``runtime.envsnap.FieldChange.to_dict``: one environment field that differs from the baseline's."""

    field: str
    old: Any  # the field's value as captured (a JSON scalar or a list of strings), read back as written
    new: Any
    stable: bool


class WorkerNote(TypedDict, total=False):
    """What a kept check worker adds (``daemon.warm_worker``): the process and what this check built."""

    pid: int
    checks: int
    session_built: bool
    model_hashed: bool


class Details(TypedDict, total=False):
    """``CheckResult.details``: what the run page, the API and the diagnosis show beside the verdict."""

    session: SessionDetails
    model: ModelDetails
    benchset_version: int
    env_diff: list[EnvChange]
    baseline_source: str  # captured | reference | ...: a reference holds the framework's numbers, not ORT's
    input_casts: dict[str, str]  # input -> "float32->float16"
    benchset_note: str
    model_diff: Document  # ModelDiff.to_dict, when the model file differs from the baseline's
    lint: Document  # exportcheck.lint_warnings.details, or {"note": why not linted}
    batch_invariance: Document  # exportcheck.batch's details, or {"note": why not run}
    localization: Document  # LocalizationReport.to_dict, on a fail (daemon.localize_on_fail)
    diagnosis: Document  # Diagnosis.to_dict, on a fail (daemon.diagnose_on_fail)
    worker: WorkerNote
    serving: Document  # check/served.py: the drift's split (serving / model), the endpoint, the cache probe


class EnvironmentField(TypedDict, total=False):
    """One recorded fact of a snapshot."""

    value: Any  # a JSON scalar or a list of strings, read back as written
    stable: bool


class EnvironmentSnapshot(TypedDict, total=False):
    """``CheckResult.environment``: ``runtime.envsnap.EnvSnapshot.to_dict``."""

    fingerprint: str
    schema: int
    captured_at: Any  # RFC 3339 text; epoch seconds in documents of older versions: read back as written
    fields: dict[str, EnvironmentField]
