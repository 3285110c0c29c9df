"""The types of what a check result carries beside its numbers: ``CheckResult.details`` and ``.environment``.

Both are JSON objects on every shape of a run (the spool, the store, ``check --json``, the API), and both
used to be ``Mapping[str, Any]``: a non-finite float and the string that spells it (``"Infinity"``) were
written alike, so a reader either turned every such string into a float or none. Typed here, a reader
turns a spelling back into a float exactly where the type says float (``monitor.shapes``), and text
stays text everywhere else.

- ``Details``: the keys a check writes, each with its type. The plain ones (``session``, ``model``,
  ``env_diff``, ``worker``, ``concurrency``, ...) are typed to their leaves. The *documents* (``model_diff``, ``lint``,
  ``batch_invariance``, ``calibration_coverage``, ``localization``, ``diagnosis``) are ``Document``: JSON
  objects their own modules define (``ModelDiff.to_dict``, ``LocalizationReport.to_dict``, ``Diagnosis.to_dict``, ...),
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


class ConcurrencyOutput(TypedDict, total=False):
    """One output whose concurrent answers differ bitwise from the serial ones (``check/concurrency.py``)."""

    answers_differing: int  # concurrent answers of this output unlike their sample's serial answer
    samples: list[int]  # the samples concerned (the first 100)
    first_sample: int  # the differing answer measured element by element against a serial re-run
    elements_differing: int
    elements: int
    max_abs_difference: float  # the largest finite |a-b| among the differing elements (absent: none finite)
    shape_or_dtype: str  # "float32 (2, 3) vs float16 (2, 3)" when those differ
    serial_rerun_bitwise: bool  # the serial re-run equals the first serial answer: the difference is concurrency's


class ConcurrencyFailure(TypedDict, total=False):
    """A concurrent call that raised (its sample's serial call did not)."""

    sample: int
    error: str


class ConcurrencyDetails(TypedDict, total=False):
    """``models[].checks.concurrency``: the same session called from ``threads`` threads at once."""

    threads: int
    passes: int  # how many times each sample ran concurrently
    rounds: int
    calls: int  # concurrent calls made
    overlapped_calls: int  # of them, in flight at the same moment as another (measured)
    max_in_flight: int
    seconds: float
    differing: dict[str, ConcurrencyOutput]  # by output name; empty when every answer is the serial one
    failures: list[ConcurrencyFailure]
    note: str  # why it did not finish (the check's timeout), or that no call overlapped another


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
    calibration_coverage: Document  # quant.check's details (quant.coverage.Coverage), or {"note": why not run}
    concurrency: ConcurrencyDetails  # models[].checks.concurrency (check/concurrency.py)
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
