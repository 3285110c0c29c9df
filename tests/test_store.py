"""The history store against a real SQLite file and a real PostgreSQL (a fresh schema per test)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.errors import BaselineError
from monitor.results import AppliedTolerance, CheckResult, OutputMetrics, OutputStats, Reason, Verdict
from monitor.sinks import Sink
from monitor.sinks.database import DatabaseSink
from monitor.store import Store
from tests.databases import BACKENDS, postgres_schema

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
ENV_A = {"fingerprint": "aaaa1111", "onnxruntime": {"version": "1.17.0"}, "cuda": "12.1", "k8s.node": "gpu-1"}
ENV_B = {"fingerprint": "bbbb2222", "onnxruntime": {"version": "1.18.0"}, "cuda": "12.1", "k8s.node": "gpu-1"}


# --- helpers shared with test_migrations.py and test_history.py -------------------------------------


def output(
    name: str = "logits",
    verdict: Verdict = Verdict.PASS,
    *,
    atol: float = 1e-5,
    reasons: tuple[Reason, ...] = (),
    **metrics: Any,
) -> OutputStats:
    return OutputStats(
        name=name,
        verdict=verdict,
        metrics=OutputMetrics(element_count=1000, **metrics),
        tolerance=AppliedTolerance(atol=atol, rtol=1e-4, cosine_min=0.999),
        reasons=reasons,
        dtype="float32",
        shape=(1, 1000),
    )


def result(
    at: datetime = T0,
    verdict: Verdict = Verdict.PASS,
    *,
    model: str = "resnet",
    environment: Mapping[str, Any] = ENV_A,
    model_sha256: str = "a" * 64,
    reasons: tuple[Reason, ...] = (),
    outputs: tuple[OutputStats, ...] | None = None,
    providers_effective: tuple[str, ...] = ("CUDAExecutionProvider", "CPUExecutionProvider"),
    details: Mapping[str, Any] | None = None,
) -> CheckResult:
    if outputs is None:
        error = 3e-5 if verdict is Verdict.FAIL else 2e-6
        outputs = (output("logits", verdict, max_abs_error=error), output("features", max_abs_error=1e-7))
    return CheckResult(
        model=model,
        verdict=verdict,
        started_at=at.timestamp(),
        finished_at=at.timestamp() + 2.5,
        reasons=reasons,
        outputs=outputs,
        baseline_id="resnet-20250101-abc",
        model_sha256=model_sha256,
        benchset="imagenet-64",
        benchset_sha256="b" * 64,
        providers_requested=("CUDAExecutionProvider", "CPUExecutionProvider"),
        providers_effective=providers_effective,
        sample_count=64,
        timings={"run": 2.1},
        environment=environment,
        attribution="environment" if verdict is Verdict.FAIL else None,
        details=details or {},
    )


def baseline_meta(baseline_id: str, created: datetime, **extra: Any) -> dict[str, Any]:
    return {
        "baseline_id": baseline_id,
        "model": "resnet",
        "created_at": created.isoformat(),
        "source": "captured",
        "model_sha256": "a" * 64,
        "benchset": "imagenet-64",
        "benchset_sha256": "b" * 64,
        "environment": ENV_A,
        "path": f"/var/lib/onnxmon/baselines/resnet/{baseline_id}",
        **extra,
    }


# --- fixtures ------------------------------------------------------------------------------------------


TABLES = ("events", "latest_runs", "baselines", "output_results", "runs", "environments", "benchsets", "models")


@pytest.fixture(scope="module")
def migrated_postgres(postgres_url: str) -> Iterator[str]:
    """One migrated PostgreSQL schema per test module; each test starts from empty tables."""
    with postgres_schema(postgres_url) as url:
        with Store(url) as s:
            s.upgrade()
        yield url


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        with Store(f"sqlite:///{tmp_path / 'history.db'}") as s:
            s.upgrade()
            yield s
        return
    import psycopg

    url = request.getfixturevalue("migrated_postgres")
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
    with Store(url) as s:
        yield s


# --- round trips ---------------------------------------------------------------------------------------


def test_a_run_round_trips_with_every_metric_and_aware_utc_times(store: Store) -> None:
    fail = output(
        "logits",
        Verdict.FAIL,
        reasons=(Reason("cosine", "0.98 < 0.999", "logits"),),
        max_abs_error=0.25,
        mean_abs_error=0.01,
        rms_error=0.02,
        max_rel_error=0.5,
        p99_abs_error=0.1,
        cosine_similarity=0.98,
        snr_db=17.5,
        max_ulp=123456,
        mismatch_count=7,
        mismatch_ratio=0.007,
        nan_count=1,
        nan_mismatch_count=0,
        inf_count=2,
        inf_mismatch_count=0,
        bitwise_equal=False,
        topk_agreement=0.99,
        nondeterminism_max_abs=0.0,
    )
    original = result(T0, Verdict.FAIL, outputs=(fail, output("features", max_abs_error=1e-7)))
    run_id = store.record_run(original, pod="onnxmon-x1")
    stored = store.run(run_id)
    assert stored is not None
    assert (stored.model, stored.verdict, stored.node, stored.pod) == ("resnet", Verdict.FAIL, "gpu-1", "onnxmon-x1")
    assert stored.started_at == T0 and stored.started_at.tzinfo is not None
    assert stored.duration_s == pytest.approx(2.5)
    assert stored.environment_fingerprint == "aaaa1111"
    assert stored.providers_effective == original.providers_effective
    assert [o.name for o in stored.outputs] == ["logits", "features"]
    assert stored.outputs[0].metrics == fail.metrics
    assert stored.outputs[0].tolerance == fail.tolerance
    assert stored.outputs[0].reasons == fail.reasons
    assert stored.outputs[0].shape == (1, 1000)
    assert (stored.worst_output, stored.worst_max_abs_error) == ("logits", 0.25)
    assert stored.worst_atol_ratio == pytest.approx(0.25 / 1e-5)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("snr_db", math.inf),  # identical outputs: infinite signal-to-noise
        ("snr_db", -math.inf),
        ("max_abs_error", math.nan),  # a NaN where the baseline has a number
        ("cosine_similarity", math.nan),
        ("max_rel_error", 1.7976931348623157e308),
        ("mean_abs_error", 5e-324),  # smallest subnormal survives
        ("topk_agreement", None),  # None means "not asked", distinct from NaN
        ("nondeterminism_max_abs", math.nan),
    ],
)
def test_non_finite_and_extreme_metrics_round_trip(store: Store, field: str, value: float | None) -> None:
    run_id = store.record_run(result(outputs=(output(**{field: value}),)))
    stored = store.run(run_id)
    assert stored is not None
    got = getattr(stored.outputs[0].metrics, field)
    if value is not None and math.isnan(value):
        assert got is not None and math.isnan(got)
    else:
        assert got == value


def test_json_columns_accept_non_finite_floats(store: Store) -> None:
    run_id = store.record_run(result(details={"ratio": math.inf, "nested": [math.nan, 1.5]}))
    stored = store.run(run_id)
    assert stored is not None
    assert stored.details == {"ratio": "Infinity", "nested": ["NaN", 1.5]}


def test_naive_datetimes_are_refused_rather_than_guessed(store: Store) -> None:
    store.record_baseline(baseline_meta("b1", T0))
    with pytest.raises(Exception, match="naive datetime"):
        store.record_promotion("resnet", "b1", "me", at=datetime(2025, 1, 1))


# --- events --------------------------------------------------------------------------------------------


def kinds(store: Store, model: str = "resnet") -> list[str]:
    return [e.kind for e in reversed(store.events(model=model))]


def test_verdict_pass_fail_pass_writes_two_verdict_changed_events(store: Store) -> None:
    for i, verdict in enumerate([Verdict.PASS, Verdict.PASS, Verdict.FAIL, Verdict.FAIL, Verdict.PASS]):
        store.record_run(result(T0 + timedelta(minutes=15 * i), verdict))
    flips = [(e.old, e.new) for e in reversed(store.events(model="resnet", kind="verdict_changed"))]
    assert flips == [("pass", "fail"), ("fail", "pass")]


def test_a_model_failing_from_its_first_run_is_a_change_from_nothing(store: Store) -> None:
    store.record_run(result(T0, Verdict.ERROR, outputs=(), reasons=(Reason("no_baseline"),)))
    (event,) = store.events(model="resnet")
    assert (event.kind, event.old, event.new) == ("verdict_changed", None, "error")
    assert event.detail["reasons"] == ["no_baseline"]


def test_a_new_environment_fingerprint_writes_environment_changed_with_the_diff(store: Store) -> None:
    store.record_run(result(T0, environment=ENV_A))
    run_id = store.record_run(result(T0 + timedelta(hours=1), Verdict.FAIL, environment=ENV_B))
    (event,) = store.events(model="resnet", kind="environment_changed")
    assert (event.old, event.new, event.run_id) == ("aaaa1111", "bbbb2222", run_id)
    assert event.detail["diff"] == [{"field": "onnxruntime.version", "old": "1.17.0", "new": "1.18.0"}]
    assert store.environment("bbbb2222") == ENV_B


def test_a_model_hash_change_writes_model_changed(store: Store) -> None:
    store.record_run(result(T0, model_sha256="a" * 64))
    store.record_run(result(T0 + timedelta(hours=1), model_sha256="c" * 64))
    assert kinds(store) == ["model_changed"]


def test_provider_fallback_writes_began_and_ended(store: Store) -> None:
    fallback = (Reason("provider_fallback", "CUDAExecutionProvider not in use"),)
    store.record_run(result(T0))
    store.record_run(
        result(T0 + timedelta(minutes=15), reasons=fallback, providers_effective=("CPUExecutionProvider",))
    )
    store.record_run(
        result(T0 + timedelta(minutes=30), reasons=fallback, providers_effective=("CPUExecutionProvider",))
    )
    store.record_run(result(T0 + timedelta(minutes=45)))
    assert kinds(store) == ["provider_fallback_began", "provider_fallback_ended"]
    began = store.events(model="resnet", kind="provider_fallback_began")[0]
    assert began.new == "CPUExecutionProvider"


def test_state_changes_compare_runs_on_the_same_node_only(store: Store) -> None:
    store.record_run(result(T0), node="gpu-1")
    store.record_run(result(T0 + timedelta(minutes=1), Verdict.FAIL), node="gpu-2")
    store.record_run(result(T0 + timedelta(minutes=2)), node="gpu-1")
    events = store.events(model="resnet")
    assert [(e.kind, e.node, e.old, e.new) for e in events] == [("verdict_changed", "gpu-2", None, "fail")]


def test_baselines_record_capture_and_promotion_with_events(store: Store) -> None:
    first_run = store.record_run(result(T0))
    store.record_baseline(baseline_meta("b1", T0, run_id=first_run))
    store.record_baseline(baseline_meta("b2", T0 + timedelta(days=1), source="imported", environment=ENV_B))
    store.record_baseline(baseline_meta("b2", T0 + timedelta(days=1), source="imported", environment=ENV_B))
    store.record_promotion("resnet", "b1", "ci", at=T0 + timedelta(days=2))
    store.record_promotion("resnet", "b2", "alice", at=T0 + timedelta(days=3))
    history = store.baseline_history("resnet")
    assert [(b.baseline_id, b.is_active, b.promoted_by) for b in history] == [
        ("b1", False, "ci"),
        ("b2", True, "alice"),
    ]
    assert history[0].run_id == first_run and history[1].run_id is None
    assert history[1].environment_fingerprint == "bbbb2222"
    assert (history[1].benchset, history[1].source) == ("imagenet-64", "imported")
    promotions = [(e.old, e.new) for e in reversed(store.events(model="resnet", kind="baseline_promoted"))]
    assert promotions == [(None, "b1"), ("b1", "b2")]
    assert kinds(store).count("baseline_captured") == 2  # recording b2 twice is one capture
    assert (history[0].active_from, history[0].active_until) == (T0 + timedelta(days=2), T0 + timedelta(days=3))
    assert (history[1].active_from, history[1].active_until) == (T0 + timedelta(days=3), None)


def test_promotion_is_idempotent_and_a_baseline_active_on_disk_is_mirrored(store: Store) -> None:
    store.record_baseline(baseline_meta("b1", T0, active=True, promoted_by="alice"))
    store.record_promotion("resnet", "b1", "bob", at=T0 + timedelta(hours=1))  # already active: nothing to do
    store.record_baseline(baseline_meta("b1", T0, active=True))
    (only,) = store.baseline_history("resnet")
    assert (only.is_active, only.promoted_by, only.active_from) == (True, "alice", T0)
    assert kinds(store) == ["baseline_captured", "baseline_promoted"]


def test_promoting_an_unrecorded_baseline_is_a_user_error(store: Store) -> None:
    with pytest.raises(BaselineError, match="'nope' of model 'resnet' is not recorded"):
        store.record_promotion("resnet", "nope", "alice")


def test_baseline_metadata_without_an_id_is_a_user_error(store: Store) -> None:
    with pytest.raises(BaselineError, match="'baseline_id' is missing"):
        store.record_baseline({"model": "resnet", "created_at": T0.isoformat()})


# --- reads ---------------------------------------------------------------------------------------------


def test_latest_per_model_is_the_newest_run_per_model_and_node_with_outputs(store: Store) -> None:
    store.record_run(result(T0), node="gpu-1")
    newest = store.record_run(result(T0 + timedelta(minutes=5), Verdict.FAIL), node="gpu-1")
    other = store.record_run(result(T0, model="bert"), node="gpu-2")
    latest = store.latest_per_model()
    assert [(r.model, r.node, r.id) for r in latest] == [("bert", "gpu-2", other), ("resnet", "gpu-1", newest)]
    assert [o.name for o in latest[1].outputs] == ["logits", "features"]


def test_history_puts_an_event_just_before_the_run_that_caused_it(store: Store) -> None:
    store.record_run(result(T0, environment=ENV_A))
    store.record_run(result(T0 + timedelta(hours=1), Verdict.FAIL, environment=ENV_B))
    items = store.history("resnet")
    assert [i.kind for i in items] == ["run", "verdict_changed", "environment_changed", "run"]
    assert items[0].run is not None and items[0].run.verdict is Verdict.FAIL


def test_history_honours_since_limit_and_node(store: Store) -> None:
    for i in range(6):
        store.record_run(result(T0 + timedelta(minutes=i)), node="gpu-1" if i % 2 else "gpu-2")
    assert len([i for i in store.history("resnet", limit=3) if i.run]) == 3
    since = store.history("resnet", since=T0 + timedelta(minutes=4))
    assert [i.run.started_at.minute for i in since if i.run] == [5, 4]
    assert {i.run.node for i in store.history("resnet", node="gpu-1") if i.run} == {"gpu-1"}
    assert store.history("unknown") == []


def test_environments_are_found_by_fingerprint_prefix(store: Store) -> None:
    store.record_run(result(T0, environment=ENV_A))
    store.record_run(result(T0 + timedelta(hours=1), environment=ENV_B))
    assert [e.fingerprint for e in store.find_environments("bbbb")] == ["bbbb2222"]
    assert store.find_environments("b_b") == []  # LIKE wildcards are literal
    assert store.environment("missing") is None


def test_ping_and_models(store: Store) -> None:
    store.record_run(result(model="zeta"))
    store.record_run(result(model="alpha"))
    assert store.ping()
    assert store.models() == ["alpha", "zeta"]


@pytest.mark.database
def test_an_unreachable_database_does_not_ping() -> None:
    with Store("postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=1") as unreachable:
        assert unreachable.ping() is False


def test_the_database_sink_writes_one_run_per_result(store: Store) -> None:
    sink = DatabaseSink(store, node="node-7")
    assert isinstance(sink, Sink)
    sink.write(result())
    (run,) = store.runs("resnet")
    assert run.node == "node-7"


# --- retention -----------------------------------------------------------------------------------------


def test_prune_keeps_failures_longer_and_never_deletes_a_baselines_run(store: Store) -> None:
    now = T0 + timedelta(days=100)
    old_pass = store.record_run(result(T0))
    provenance = store.record_run(result(T0 + timedelta(minutes=1)))
    old_fail = store.record_run(result(T0 + timedelta(minutes=2), Verdict.FAIL))
    store.record_run(result(now - timedelta(days=1)))  # recent, and the latest: kept
    store.record_baseline(baseline_meta("b1", T0, run_id=provenance))
    stats = store.prune(passing_older_than=timedelta(days=30), failures_older_than=timedelta(days=365), now=now)
    assert (stats.runs_deleted, stats.outputs_deleted, stats.runs_kept_for_baselines) == (1, 2, 1)
    assert store.run(old_pass) is None
    assert store.run(provenance) is not None and store.run(old_fail) is not None
    # the verdict flip of the failing run survives; its link to the run stays
    assert [e.kind for e in store.events(model="resnet", kind="verdict_changed")] == ["verdict_changed"] * 2
    stats = store.prune(passing_older_than=timedelta(days=30), failures_older_than=timedelta(days=90), now=now)
    assert stats.runs_deleted == 1 and store.run(old_fail) is None
    assert all(e.run_id != old_fail for e in store.events(model="resnet"))
    assert len(store.events(model="resnet", kind="verdict_changed")) == 2  # events outlive their runs


def test_prune_deletes_events_only_when_asked(store: Store) -> None:
    store.record_run(result(T0, Verdict.FAIL))
    store.record_run(result(T0 + timedelta(days=200)))
    now = T0 + timedelta(days=400)
    kept = store.prune(passing_older_than=timedelta(days=1), failures_older_than=timedelta(days=1), now=now)
    assert kept.events_deleted == 0 and len(store.events()) == 2
    gone = store.prune(
        passing_older_than=timedelta(days=1),
        failures_older_than=timedelta(days=1),
        events_older_than=timedelta(days=300),
        now=now,
    )
    assert gone.events_deleted == 1 and [e.new for e in store.events()] == ["pass"]
