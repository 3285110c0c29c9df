"""The pieces of the configuration schema: tolerances, schedules, the store, defaults, sessions, models.

The sections of ``onnxmon serve`` itself (``daemon:``, ``api:``, ``logging:``) are ``serve_schema``'s.

Each class is one YAML section, validated by pydantic with unknown keys refused (a typo in
a tolerance must not silently do nothing). ``monitor.config.settings`` assembles them into
``Settings`` and owns reading the file; import these names from there.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from monitor.config import cron, fields
from monitor.config.benchset_schema import BENCHSET_SOURCES as BENCHSET_SOURCES
from monitor.config.benchset_schema import BenchsetConfig as BenchsetConfig
from monitor.config.benchset_schema import GenerateSpec as GenerateSpec
from monitor.config.decisions import DECISIONS_FIELD, FLIP_RATIO_FIELD, NUMERIC_FIELD, numeric_warn_problem
from monitor.config.decisions import Decision as Decision
from monitor.config.endpoint_schema import ENDPOINT_FIELD
from monitor.config.endpoint_schema import EndpointConfig as EndpointConfig
from monitor.config.fields import DAY as DAY
from monitor.config.fields import MAX_BACKOFF as MAX_BACKOFF
from monitor.config.fields import MAX_INTERVAL as MAX_INTERVAL
from monitor.config.fields import MAX_MEMORY_MB as MAX_MEMORY_MB
from monitor.config.fields import MAX_REPEATS as MAX_REPEATS
from monitor.config.fields import MAX_RETENTION as MAX_RETENTION
from monitor.config.fields import MAX_SHORT as MAX_SHORT
from monitor.config.fields import URL_SHAPE as URL_SHAPE
from monitor.config.fields import Duration as Duration
from monitor.config.fields import StrictModel as StrictModel
from monitor.config.fields import parse_duration as parse_duration
from monitor.results import AppliedTolerance


class TopK(StrictModel):
    k: int = Field(ge=1, description="How many top classes (last axis) must agree.")
    min_agreement: float = Field(
        default=1.0, ge=0.0, le=1.0, description="Fraction of rows whose top-k index sets must match."
    )


class Tolerance(StrictModel):
    """Thresholds for one output; unset fields inherit from the level above."""

    atol: float | None = Field(
        default=None, ge=0.0, allow_inf_nan=False, description="Absolute tolerance in |a-b| <= atol + rtol*|b|."
    )
    rtol: float | None = Field(
        default=None, ge=0.0, allow_inf_nan=False, description="Relative tolerance in |a-b| <= atol + rtol*|b|."
    )
    cosine_min: float | None = Field(
        default=None, ge=-1.0, le=1.0, description="Fail when the cosine similarity falls below this."
    )
    snr_min_db: float | None = Field(
        default=None, allow_inf_nan=False, description="Fail when the signal-to-noise ratio (dB) is lower."
    )
    max_mismatch_ratio: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Fraction of elements allowed outside atol/rtol (default 0)."
    )
    topk: TopK | None = Field(default=None, description="Top-k agreement along the last axis (classifiers).")
    max_decision_flip_ratio: float | None = FLIP_RATIO_FIELD
    numeric: Literal["fail", "warn"] | None = NUMERIC_FIELD

    def over(self, base: Tolerance) -> Tolerance:
        """This tolerance with every unset field taken from ``base``."""
        merged = base.model_dump(exclude_unset=True) | self.model_dump(exclude_unset=True)
        return Tolerance.model_validate(merged)

    def applied(self) -> AppliedTolerance:
        """The concrete thresholds (library defaults fill what nobody set)."""
        return AppliedTolerance(
            atol=1e-5 if self.atol is None else self.atol,
            rtol=1e-4 if self.rtol is None else self.rtol,
            cosine_min=self.cosine_min,
            snr_min_db=self.snr_min_db,
            max_mismatch_ratio=0.0 if self.max_mismatch_ratio is None else self.max_mismatch_ratio,
            topk_k=self.topk.k if self.topk else None,
            topk_min_agreement=self.topk.min_agreement if self.topk else None,
            max_decision_flip_ratio=self.max_decision_flip_ratio or 0.0,
            numeric=self.numeric or "fail",
        )


class ModelTolerance(StrictModel):
    """A model's tolerances: a default and per-output overrides (unset fields inherit)."""

    default: Tolerance = Field(default=Tolerance(), description="Applies to every output of the model.")
    outputs: dict[str, Tolerance] = Field(default={}, description="Per-output overrides, by output name.")


class Schedule(StrictModel):
    """When the daemon runs a model: a fixed ``interval`` or a ``cron`` expression."""

    interval: Duration | None = Field(default=None, le=MAX_INTERVAL, description="Run every this long (e.g. 15m).")
    cron: str | None = Field(
        default=None,
        description="5-field cron expression in UTC (e.g. '*/15 * * * *'); weekdays as cron counts them"
        " (0 and 7 are Sunday, '1-5' is Monday to Friday) or as names ('mon-fri'); one that never fires"
        " ('0 0 31 2 *') is refused.",
    )
    jitter: Duration = Field(default=0.0, le=MAX_SHORT, description="Random delay up to this long, to spread load.")

    @model_validator(mode="after")
    def _one_trigger(self) -> Schedule:
        if (self.interval is None) == (self.cron is None):
            raise ValueError("set exactly one of 'interval' or 'cron'")
        if self.interval is not None and self.interval <= 0:
            raise ValueError("interval must be > 0")
        problem = cron.problem_of(self.cron) if self.cron is not None else None
        if problem is not None:  # malformed, or it never fires (0 0 31 2 *)
            raise ValueError(problem)
        return self

    def longest_gap_seconds(self, *, now: dt.datetime | None = None) -> float:
        """Longest time between two scheduled starts: interval + jitter, or the longest cron gap over a week + jitter.

        A cron expression that cannot be parsed gives NaN (loading the config refuses those first).
        """
        if self.interval is not None:
            return float(self.interval) + float(self.jitter)
        assert self.cron is not None
        start = (now or dt.datetime.now(dt.UTC)).replace(minute=0, second=0, microsecond=0)
        return cron.longest_gap_seconds(self.cron, start.date()) + float(self.jitter)

    def next_gap_seconds(self, *, now: dt.datetime | None = None) -> float:
        """One interval from ``now``: the interval, or the cron's gap between its next two starts (jitter aside)."""
        if self.interval is not None:
            return float(self.interval)
        assert self.cron is not None
        return cron.next_gap_seconds(self.cron, now or dt.datetime.now(dt.UTC))

    def shortest_gap_seconds(self, *, now: dt.datetime | None = None, under: float = math.inf) -> float:
        """Shortest time between two scheduled starts (jitter aside): what a check's timeout must stay under.

        Exact below ``under``; a gap of ``under`` or more may be given as any value not below it.
        """
        if self.interval is not None:
            return float(self.interval)
        assert self.cron is not None
        return cron.shortest_gap_seconds(self.cron, (now or dt.datetime.now(dt.UTC)).date(), under)


class StoreConfig(StrictModel):
    """Where history, baselines and benchmark sets live."""

    url: str = Field(
        default="sqlite:///onnxmon.db",
        description="SQLAlchemy URL of the history database (postgresql+psycopg://… in production).",
        repr=False,
    )
    url_file: Path | None = Field(
        default=None,
        description="File holding the database URL (a mounted secret, e.g. /run/secrets/onnxmon-db/url), read"
        " at start; replaces store.url, which must then be left unset. Relative to the config file.",
    )
    migrate: Literal["off", "auto"] = Field(
        default="off",
        description="`auto`: migrate a server database (PostgreSQL) to the newest schema when opened; `off`: only"
        " `onnxmon db upgrade` does, and a command on one behind stops in one line, writing nothing (SQLite: auto).",
    )
    baselines_dir: Path = Field(default=Path("baselines"), description="Directory of baselines (tensors + metadata).")
    benchsets_dir: Path = Field(default=Path("benchsets"), description="Directory of materialized benchmark sets.")
    spool_dir: Path | None = Field(
        default=None,
        description="Where results wait while the database is down or full. Default:"
        " $XDG_STATE_HOME/onnxmon/spool/<16 hex of the store URL's sha256> (XDG_STATE_HOME defaults to"
        " ~/.local/state), off the database's volume, one per database; set it to a volume of its own.",
    )
    spool_max_results: int = Field(default=10_000, ge=1, description="Most results kept in the spool; oldest dropped.")
    read_timeout: Duration = Field(
        default=3.0,
        gt=0,
        le=MAX_SHORT,
        description="Longest wait of a read (/readyz, /metrics, the pages); keep it below the readiness"
        " probe's timeout.",
    )
    write_timeout: Duration = Field(
        default=10.0,
        gt=0,
        le=MAX_SHORT,
        description="Longest wait of a write; then the result goes to the spool. Bounds SIGTERM's wait"
        " for a hung database.",
    )
    migrate_timeout: Duration = Field(
        default=120.0,
        gt=0,
        le=MAX_SHORT,
        description="Longest wait for the schema lock when a database behind is migrated (another onnxmon"
        " migrating it, a session locking its tables); then one line and exit 3. The revision check waits"
        " at most store.read_timeout.",
    )
    retention_passing: Duration = Field(
        default=30 * 86400.0, le=MAX_RETENTION, description="Prune passing runs older than this."
    )
    retention_failures: Duration = Field(
        default=365 * 86400.0,
        le=MAX_RETENTION,
        description="Prune failing/error runs older than this (events are kept).",
    )

    @field_validator("migrate", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        """``migrate: off`` unquoted is YAML 1.1's ``false`` (so is ``ONNXMON_STORE__MIGRATE=off``): "off"."""
        return "off" if value is False else value

    @field_validator("url")
    @classmethod
    def _url_shape(cls, url: str) -> str:
        if not URL_SHAPE.match(url) or fields.has_control_characters(url):
            raise ValueError("expected a SQLAlchemy URL like 'sqlite:///onnxmon.db' or 'postgresql+psycopg://host/db'")
        return url


class Defaults(StrictModel):
    """Values every model inherits unless it sets its own."""

    tolerance: Tolerance = Field(default=Tolerance(atol=1e-5, rtol=1e-4), description="Default tolerance.")
    repeats: int = Field(default=1, ge=1, le=MAX_REPEATS, description="Runs per sample; >1 detects nondeterminism.")
    timeout: Duration = Field(
        default=600.0,
        gt=0,
        le=MAX_SHORT,
        description="Hard limit for one check (must be < the interval, or < the shortest gap between two starts"
        " of a cron).",
    )
    schedule: Schedule = Field(default=Schedule(interval=900.0), description="Default schedule of the daemon.")


class ProviderSpec(StrictModel):
    """An execution provider with its options, exactly as production configures it."""

    name: str = Field(pattern=r"^[A-Za-z]+ExecutionProvider$", description="e.g. CUDAExecutionProvider.")
    options: dict[str, str | int | float | bool] = Field(default={}, description="Provider options.")


GraphOptLevel = Literal["disable", "basic", "extended", "layout", "all"]


class SessionConfig(StrictModel):
    """ONNX Runtime session options, as production sets them."""

    graph_optimization_level: GraphOptLevel = Field(default="all", description="disable|basic|extended|layout|all.")
    intra_op_num_threads: int = Field(default=0, ge=0, description="0 lets ONNX Runtime choose.")
    inter_op_num_threads: int = Field(default=0, ge=0, description="0 lets ONNX Runtime choose.")
    execution_mode: Literal["sequential", "parallel"] = Field(default="sequential", description="Execution mode.")
    deterministic_compute: bool = Field(
        default=False, description="SessionOptions.use_deterministic_compute (the attribute, not a config key)."
    )
    config_entries: dict[str, str] = Field(default={}, description="Session config entries (add_session_config_entry).")
    run_config_entries: dict[str, str] = Field(
        default={}, description="Run config entries (RunOptions.add_run_config_entry), set on every inference run."
    )


def _provider_list(value: Any) -> Any:
    if isinstance(value, list):
        return [{"name": v} if isinstance(v, str) else v for v in value]
    return value


class BatchInvariance(StrictModel):
    """Run one batch of ``batch`` samples and ``batch`` single-sample runs; fail when they differ."""

    batch: int = Field(default=8, ge=2, le=4096, description="Samples stacked on axis 0 for the batched run.")


class CalibrationCoverage(StrictModel):
    """Per quantized tensor of a QDQ model: the share of benchmark values its scale and zero point clip."""

    max_clipped_share: float = Field(
        default=0.01,
        ge=0.0,
        le=1.0,
        description="Reason calibration_out_of_range when a tensor clips more than this share of its values.",
    )
    min_codes_used_share: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="List tensors using fewer of their codes than this share (an under-used range); never a reason.",
    )


MAX_CONCURRENCY = 64  # threads calling one session at once: beyond any server's worker pool on one model


def _concurrency(value: Any) -> Any:
    """``off`` (YAML's ``false``) and ``1`` are the serial replay only; ``true`` names no thread count."""
    if value is False or value == "off":
        return None
    if value is True:
        raise ValueError("expected a number of threads (2 or more), or off; got true")
    return value


class ModelChecks(StrictModel):
    """Checks run beside the comparison with the baseline."""

    concurrency: Annotated[int | None, BeforeValidator(_concurrency)] = Field(
        default=None,
        ge=1,
        le=MAX_CONCURRENCY,
        description="After the serial replay, replay the benchmark set through the same session from this many"
        " threads at once (each sample 3 times, interleaved) and compare every answer bitwise with the serial one"
        " (reason concurrency_variant); off or 1: serial only.",
    )

    batch_invariance: BatchInvariance | None = Field(
        default=None,
        description="Compare a batched run with single-sample runs (reason batch_variant); needs a dynamic batch axis.",
    )
    calibration_coverage: CalibrationCoverage | None = Field(
        default=None,
        description="QDQ models: values outside each quantized tensor's calibrated range (calibration_out_of_range).",
    )
    lint: bool = Field(
        default=True, description="Report the model's export hazards (onnxmon lint) with each run, as warnings."
    )


class ModelConfig(StrictModel):
    """A deployed model to monitor."""

    name: str = Field(pattern=fields.NAME_PATTERN, description="Name used in metrics, API and CLI.")
    path: Path = Field(description="The .onnx file (external data next to it is hashed too).")
    benchset: str = Field(description="Name of a declared benchmark set.")
    providers: Annotated[list[ProviderSpec], BeforeValidator(_provider_list)] = Field(
        default=[ProviderSpec(name="CPUExecutionProvider")],
        description="Execution providers in priority order; a missing one at run time is a provider_fallback.",
    )
    session: SessionConfig = Field(default=SessionConfig(), description="Session options.")
    repeats: int | None = Field(default=None, ge=1, le=MAX_REPEATS, description="Overrides defaults.repeats.")
    timeout: Duration | None = Field(default=None, gt=0, le=MAX_SHORT, description="Overrides defaults.timeout.")
    tolerance: ModelTolerance = Field(default=ModelTolerance(), description="Tolerances of this model.")
    schedule: Schedule | None = Field(default=None, description="Overrides defaults.schedule.")
    checks: ModelChecks = Field(default=ModelChecks(), description="Extra checks: batch invariance, export lint.")
    localize_on_fail: bool = Field(
        default=False, description="On a fail, localize the first divergent node (within half the timeout)."
    )
    decisions: dict[str, Decision] = DECISIONS_FIELD
    endpoint: EndpointConfig | None = ENDPOINT_FIELD

    @field_validator("providers")
    @classmethod
    def _non_empty(cls, providers: list[ProviderSpec]) -> list[ProviderSpec]:
        if not providers:
            raise ValueError("list at least one execution provider")
        names = [p.name for p in providers]
        if len(set(names)) != len(names):
            raise ValueError(f"a provider is listed twice: {names}")
        return providers

    @model_validator(mode="after")
    def _warn_needs_decisions(self) -> ModelConfig:
        problem = numeric_warn_problem(self.tolerance.default, self.tolerance.outputs, self.decisions)
        if problem is not None:
            raise ValueError(problem)
        return self
