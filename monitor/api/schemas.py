"""The JSON shapes of the HTTP API (pydantic models, so the OpenAPI document describes them).

Non-finite numbers: JSON has no NaN or Infinity, and a metric can be either (an SNR of two equal
outputs is +inf; a value not measured is NaN). Every float the API returns is therefore a
``JsonNumber``: a JSON number when finite, else one of the strings ``"Infinity"``,
``"-Infinity"``, ``"NaN"``, the rule of ``monitor.jsonsafe`` that every JSON onnxmon writes
follows (docs/json.md). Free-form objects (snapshots, details, event details) go through
``json_safe`` first.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from monitor import jsonsafe, shapes
from monitor.results import OutputStats, Reason
from monitor.store import BaselineRecord, EnvironmentRecord, EventRecord, RunRecord

JsonNumber = float | jsonsafe.NonFinite
VerdictName = Literal["pass", "fail", "error"]


def num(value: float | None) -> JsonNumber | None:
    """``value`` as a JSON-safe number: non-finite floats become ``"Infinity"``, ``"-Infinity"`` or ``"NaN"``."""
    if value is None:
        return None
    return jsonsafe.number(float(value))


def json_safe(value: Any) -> Any:
    """A deep copy of ``value`` with every non-finite float encoded by ``num``; tuples become lists.

    Datetimes become ISO 8601 text, any other object that is not JSON its ``str``.
    """
    return jsonsafe.jsonable(value, default=_text)


def _text(value: Any) -> str:
    return jsonsafe.timestamp(value) if isinstance(value, datetime) else str(value)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class Problem(_Out):
    """An error: what went wrong and, where useful, how to fix it."""

    detail: str


class Health(_Out):
    status: Literal["ok"] = "ok"


class ApiRoute(_Out):
    path: str
    methods: list[str]
    summary: str


class ApiIndex(_Out):
    name: Literal["onnxmon"] = "onnxmon"
    version: str
    openapi: str
    routes: list[ApiRoute]


class Readiness(_Out):
    ready: bool
    checks: dict[str, bool]
    failed: list[str]
    info: dict[str, int] = {}
    reasons: dict[str, str] = {}


class ReasonOut(_Out):
    code: str
    detail: str = ""
    output: str | None = None

    @classmethod
    def of(cls, reason: Reason) -> ReasonOut:
        return cls(code=reason.code, detail=reason.detail, output=reason.output)


class NodeStatus(_Out):
    """Where a model stands on one node (daemonset mode runs it on every GPU node)."""

    node: str | None
    last_run_id: int
    last_run_at: datetime
    last_verdict: VerdictName


class ModelSummary(_Out):
    """A configured model and where it stands: the newest run anywhere, and the newest per node."""

    name: str
    benchset: str
    providers: list[str]
    active_baseline_id: str | None
    last_run_id: int | None
    last_run_at: datetime | None
    last_verdict: VerdictName | None
    last_node: str | None
    nodes: list[NodeStatus] = []


class RunSummary(_Out):
    """One run without its outputs."""

    id: int
    model: str
    verdict: VerdictName
    started_at: datetime
    finished_at: datetime
    duration_s: JsonNumber
    node: str | None
    pod: str | None
    reasons: list[ReasonOut]
    attribution: str | None
    baseline_id: str | None
    environment_fingerprint: str | None
    model_sha256: str | None
    benchset: str | None
    sample_count: int
    providers_requested: list[str]
    providers_effective: list[str]
    worst_output: str | None
    worst_max_abs_error: JsonNumber | None
    worst_atol_ratio: JsonNumber | None
    error_ratio: JsonNumber | None = Field(
        default=None, description="error ÷ tolerance: the largest error_ratio of the run's outputs; 1 is the line"
    )
    candidate: bool = Field(
        default=False, description="a rehearsal's run on a candidate stack (onnxmon rehearse), not production's"
    )
    run_digest: str | None = Field(
        default=None, description="xxh3-128 of every output of every sample: equal digests, equal bits (docs/fleet.md)"
    )
    stack_key: str | None = Field(
        default=None, description="the digest of the stack key's fields: the fleet vote compares runs that share it"
    )

    @classmethod
    def of(cls, run: RunRecord) -> RunSummary:
        return cls(**_run_fields(run))


# What a run's JSON leaves out of ``RunRecord``'s fields: a summary has no outputs, timings or details (the
# detail adds them), and neither shows the benchmark set's hash. Every other field is shown under its name.
RUN_HIDDEN = ("outputs", "timings", "details", "benchset_sha256", "digests", "stack")
RUN_IN_DETAIL = ("outputs", "timings", "details", "digests", "stack")  # hidden from a summary, shown in a detail


def _run_fields(run: RunRecord) -> dict[str, Any]:
    """``RunRecord``'s fields (``monitor.shapes``) less ``RUN_HIDDEN``, floats JSON-safe, times as they are."""
    return {
        k: v if isinstance(v, datetime) else json_safe(v) for k, v in shapes.to_dict(run, exclude=RUN_HIDDEN).items()
    }


class DecisionsOut(_Out):
    """What the output decides (``models[].decisions``) and how many of its decisions differ from the baseline's."""

    kind: Literal["argmax", "threshold", "equal"]
    total: int
    flipped: int
    ratio: float
    flips: list[list[int]] = Field(description="the first flipped decisions, as [sample, row]")


class OutputOut(_Out):
    """One output's comparison: every metric, the tolerance applied, its reasons, decisions and warnings."""

    name: str
    verdict: VerdictName
    dtype: str
    shape: list[int]
    metrics: dict[str, JsonNumber | int | bool | None]
    tolerance: dict[str, JsonNumber | int | str | None]
    error_ratio: JsonNumber | None
    reasons: list[ReasonOut]
    decisions: DecisionsOut | None = None
    warnings: list[ReasonOut] = Field(default=[], description="numeric drift that flipped no decision (numeric: warn)")

    @classmethod
    def of(cls, output: OutputStats) -> OutputOut:
        """Every field of ``OutputStats`` (``monitor.shapes``), JSON-safe, plus its derived ``error_ratio``."""
        return cls(**json_safe(shapes.to_dict(output)), error_ratio=num(output.error_ratio))


class FieldChangeOut(_Out):
    field: str
    old: Any
    new: Any
    stable: bool


class EnvDiff(_Out):
    """What differs from environment ``a`` to ``b`` (stable fields first); ``note`` says why it may be empty."""

    a: str | None
    b: str | None
    summary: str
    changes: list[FieldChangeOut]
    note: str | None = None


class DigestOut(_Out):
    """What one output computed: xxh3-128 per sample (dtype, shape and raw bytes), and its float64 sums."""

    name: str
    samples: list[str]
    total: JsonNumber | None = None
    magnitude: JsonNumber | None = None
    elements: int = 0


class RunDetail(RunSummary):
    """One run with every output, its timings and details, and the diff against the baseline's environment."""

    outputs: list[OutputOut]
    timings: dict[str, JsonNumber]
    details: dict[str, Any]
    env_diff: EnvDiff
    digests: list[DigestOut] = Field(default=[], description="each output's per-sample digests (docs/fleet.md)")
    stack: dict[str, str] = Field(default={}, description="the stack key's fields (docs/fleet.md)")

    @classmethod
    def build(cls, run: RunRecord, env_diff: EnvDiff) -> RunDetail:
        return cls(
            **_run_fields(run),
            outputs=[OutputOut.of(o) for o in run.outputs],
            timings={k: v for k, v in ((k, num(float(v))) for k, v in run.timings.items()) if v is not None},
            details=json_safe(run.details),
            env_diff=env_diff,
            digests=[DigestOut(**json_safe(d.to_dict())) for d in run.digests],
            stack=dict(run.stack),
        )


class BaselineOut(_Out):
    """A baseline of a model: provenance, environment, whether it is the active one."""

    baseline_id: str
    model: str
    created_at: str
    source: str
    active: bool
    model_sha256: str | None
    benchset: str | None
    environment_fingerprint: str | None
    sample_count: int | None
    outputs: list[str]
    promoted_at: datetime | None = None
    promoted_by: str | None = None
    recorded_in_store: bool = False


class EnvironmentOut(_Out):
    fingerprint: str
    first_seen: datetime
    last_seen: datetime
    snapshot: dict[str, Any]

    @classmethod
    def of(cls, record: EnvironmentRecord) -> EnvironmentOut:
        return cls(
            fingerprint=record.fingerprint,
            first_seen=record.first_seen,
            last_seen=record.last_seen,
            snapshot=json_safe(record.snapshot),
        )


class EventOut(_Out):
    id: int
    model: str
    kind: str
    at: datetime
    node: str | None
    run_id: int | None
    old: str | None
    new: str | None
    detail: dict[str, Any]

    @classmethod
    def of(cls, event: EventRecord) -> EventOut:
        return cls(
            id=event.id,
            model=event.model,
            kind=event.kind,
            at=event.at,
            node=event.node,
            run_id=event.run_id,
            old=event.old,
            new=event.new,
            detail=json_safe(event.detail),
        )


class CheckOut(_Out):
    """A check run on request: its verdict and the whole result (``CheckResult.to_dict``, JSON-safe)."""

    model: str
    verdict: VerdictName
    result: dict[str, Any]


class Promotion(_Out):
    baseline_id: str
    model: str
    promoted_by: str


class Reloaded(_Out):
    reloaded: bool
    detail: str


def baseline_out(meta: Any, *, active: bool, record: BaselineRecord | None) -> BaselineOut:
    """Merge a baseline on disk (``BaselineMeta``) with its store record (promotion time and author)."""
    fingerprint = meta.environment_fingerprint
    return BaselineOut(
        baseline_id=meta.id,
        model=meta.model,
        created_at=jsonsafe.normalized(str(meta.created_at)),
        source=str(meta.source),
        active=active,
        model_sha256=meta.model_sha256 or None,
        benchset=meta.benchset or None,
        environment_fingerprint=fingerprint,
        sample_count=meta.sample_count,
        outputs=list(meta.outputs),
        promoted_at=record.promoted_at if record is not None else None,
        promoted_by=record.promoted_by if record is not None else None,
        recorded_in_store=record is not None,
    )
