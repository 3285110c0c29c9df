"""Two replicas writing to one database at once lose no run and keep their events consistent.

Each replica is its own ``Store`` (its own engine and connection pool), writing from its own
thread, as two daemons would; both write the same model, each as its own node. Exactly-once
scheduling in sharded mode is ``test_scaleout.py``'s subject; this file is about the writes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from monitor.results import CheckResult, Reason, Verdict
from monitor.store import Store
from tests.databases import postgres_schema

RUNS_PER_REPLICA = 40
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# a verdict pattern with flips in both directions and errors
PATTERN = [Verdict.PASS, Verdict.PASS, Verdict.FAIL, Verdict.FAIL, Verdict.PASS, Verdict.ERROR, Verdict.PASS]


def verdicts() -> list[Verdict]:
    return [PATTERN[i % len(PATTERN)] for i in range(RUNS_PER_REPLICA)]


def flips(sequence: list[Verdict]) -> list[tuple[str | None, str]]:
    """The ``verdict_changed`` events a node's sequence must produce (a first run is compared with pass)."""
    changes: list[tuple[str | None, str]] = []
    previous: str | None = None
    for verdict in sequence:
        if verdict.value != (previous or Verdict.PASS.value):
            changes.append((previous, verdict.value))
        previous = verdict.value
    return changes


def result(index: int, verdict: Verdict, replica: int) -> CheckResult:
    at = (T0 + timedelta(minutes=index, milliseconds=replica)).timestamp()
    reasons = (Reason("atol_rtol", "drift"),) if verdict is Verdict.FAIL else ()
    if verdict is Verdict.ERROR:
        reasons = (Reason("timeout", "killed"),)
    return CheckResult(
        model="shared",
        verdict=verdict,
        started_at=at,
        finished_at=at + 0.5,
        reasons=reasons,
        model_sha256="a" * 64,
        environment={"fingerprint": "env-1", "k8s.node": f"replica-{replica}"},
    )


@contextmanager
def database(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'history.db'}"
        with Store(url) as store:
            store.upgrade()
        yield url
    else:
        with postgres_schema(request.getfixturevalue("postgres_url")) as url:
            with Store(url) as store:
                store.upgrade()
            yield url


@pytest.mark.parametrize("backend", [pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_two_replicas_writing_at_once_lose_no_run_and_keep_events_consistent(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with database(backend, tmp_path, request) as url:
        written: dict[int, list[int]] = {0: [], 1: []}
        failures: list[BaseException] = []
        each_round = threading.Barrier(2, timeout=60)

        def replica(number: int) -> None:
            with Store(url) as store:
                for index, verdict in enumerate(verdicts()):
                    each_round.wait()  # both replicas race for every single write
                    try:
                        written[number].append(store.record_run(result(index, verdict, number)))
                    except Exception as exc:  # collected: the assertion below names every lost write
                        failures.append(exc)

        threads = [threading.Thread(target=replica, args=(n,)) for n in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert failures == [], f"{len(failures)} write(s) lost, first: {failures[:1]}"
        assert min(written[0]) < max(written[1]) and min(written[1]) < max(written[0]), "the writes overlapped"

        with Store(url) as store:
            for number in (0, 1):
                node = f"replica-{number}"
                runs = store.runs("shared", node=node, limit=1000)
                assert sorted(r.id for r in runs) == sorted(written[number])
                assert [str(r.verdict) for r in sorted(runs, key=lambda r: r.id)] == [v.value for v in verdicts()]
                events = [e for e in store.events(model="shared", kind="verdict_changed", limit=1000) if e.node == node]
                assert [(e.old, e.new) for e in sorted(events, key=lambda e: e.id)] == flips(verdicts())
            assert store.models() == ["shared"]
            latest = {r.node: r.id for r in store.latest_per_model()}
            assert latest == {"replica-0": max(written[0]), "replica-1": max(written[1])}
