"""How fast is ``Store.history(model, limit=200)`` over 1,000,000 stored output results on PostgreSQL?

Creates a scratch database (``onnxmon_bench``), migrates it with ``Store.upgrade()``, fills it
with COPY (runs x outputs for a few models on two nodes, plus environment-change events), runs
``ANALYZE``, then times ``history`` (median of repeats, warm cache) and prints the EXPLAIN ANALYZE
of the main query. The database is dropped at the end unless ``--keep``.

    .venv/bin/python bench/bench_history.py [--server postgresql+psycopg://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime, timedelta

import psycopg
from sqlalchemy import make_url
from sqlalchemy.dialects import postgresql

from monitor.store import Store, queries
from monitor.store.queries import history_runs_query

OUTPUT_NAMES = ("logits", "boxes", "scores", "features", "mask")
NODES = ("gpu-1", "gpu-2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--database", default="onnxmon_bench")
    parser.add_argument("--runs", type=int, default=200_000)
    parser.add_argument("--outputs", type=int, default=5, choices=range(1, len(OUTPUT_NAMES) + 1))
    parser.add_argument("--models", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--keep", action="store_true", help="Keep the database afterwards.")
    args = parser.parse_args()

    server = make_url(args.server)
    admin_dsn = server.set(drivername="postgresql").render_as_string(hide_password=False)
    bench_url = server.set(database=args.database).render_as_string(hide_password=False)
    bench_dsn = server.set(drivername="postgresql", database=args.database).render_as_string(hide_password=False)
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{args.database}"')
        admin.execute(f'CREATE DATABASE "{args.database}"')
    try:
        with Store(bench_url) as store:
            store.upgrade()
            started = time.perf_counter()
            fill(bench_dsn, args.runs, args.outputs, args.models)
            print(f"filled {args.runs:,} runs x {args.outputs} outputs in {time.perf_counter() - started:.1f} s")
            measure(store, bench_dsn, args.repeats)
    finally:
        if not args.keep:
            with psycopg.connect(admin_dsn, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')


def fill(dsn: str, runs: int, outputs: int, models: int) -> None:
    """COPY ``runs`` runs (round-robin over models and nodes, 5 minutes apart) and their outputs."""
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    per_model = runs // models
    env_every = 5_000  # an environment change every 5,000 runs of a model
    tolerance = json.dumps({"atol": 1e-5, "rtol": 1e-4, "cosine_min": 0.999})
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        for m in range(models):
            cur.execute(
                "INSERT INTO models (id, name, first_seen, last_seen) VALUES (%s, %s, %s, %s)",
                (m + 1, f"model-{m}", t0, t0 + timedelta(minutes=5 * per_model)),
            )
        fingerprints = [f"env{i:04d}" for i in range(per_model // env_every + 1)]
        with cur.copy("COPY environments (fingerprint, snapshot, first_seen, last_seen) FROM STDIN") as copy:
            for i, fp in enumerate(fingerprints):
                snapshot = json.dumps({"fingerprint": fp, "onnxruntime": {"version": f"1.{17 + i}.0"}})
                copy.write_row((fp, snapshot, t0, t0))
        columns = (
            "id, model_id, node, started_at, finished_at, duration_s, verdict, reasons, sample_count, "
            "providers_requested, providers_effective, timings, details, environment_fingerprint, model_sha256, "
            "baseline_id, worst_output, worst_max_abs_error, worst_atol_ratio, attribution"
        )
        providers = json.dumps(["CUDAExecutionProvider", "CPUExecutionProvider"])
        with cur.copy(f"COPY runs ({columns}) FROM STDIN") as copy:
            for run_id in range(1, runs + 1):
                m, k = (run_id - 1) % models, (run_id - 1) // models
                failing = k % 97 == 0
                at = t0 + timedelta(minutes=5 * k)
                copy.write_row(
                    (
                        run_id, m + 1, NODES[k % 2], at, at + timedelta(seconds=3), 3.0,
                        "fail" if failing else "pass", "[]", 64, providers, providers, '{"run": 2.9}', "{}",
                        fingerprints[k // env_every], "a" * 64, f"model-{m}-base", "logits",
                        3e-5 if failing else 2e-6, 3.0 if failing else 0.2, "environment" if failing else None,
                    )
                )  # fmt: skip
        with cur.copy(
            "COPY output_results (run_id, name, verdict, dtype, shape, element_count, max_abs_error, mean_abs_error,"
            " rms_error, max_rel_error, p99_abs_error, cosine_similarity, snr_db, max_ulp, mismatch_count,"
            " mismatch_ratio, nan_count, nan_mismatch_count, inf_count, inf_mismatch_count, bitwise_equal,"
            " topk_agreement, nondeterminism_max_abs, error_ratio, tolerance, reasons) FROM STDIN"
        ) as copy:
            for run_id in range(1, runs + 1):
                for name in OUTPUT_NAMES[:outputs]:
                    copy.write_row(
                        (
                            run_id, name, "pass", "float32", "[1, 1000]", 1000, 2e-6, 1e-7, 2e-7, 1e-3, 1e-6,
                            0.99999, 95.0, 12, 0, 0.0, 0, 0, 0, 0, False, None, None, 0.02, tolerance, "[]",
                        )
                    )  # fmt: skip
        with cur.copy("COPY events (model_id, node, kind, at, old, new, detail) FROM STDIN") as copy:
            for m in range(models):
                for i in range(1, len(fingerprints)):
                    at = t0 + timedelta(minutes=5 * i * env_every)
                    for node in NODES:
                        row = (m + 1, node, "environment_changed", at, fingerprints[i - 1], fingerprints[i], "{}")
                        copy.write_row(row)
        for m in range(models):
            count = len(range(m + 1, runs + 1, models))  # run ids of model m are k * models + m + 1
            for n, node in enumerate(NODES):
                k = count - 1 if (count - 1) % 2 == n else count - 2
                cur.execute(
                    "INSERT INTO latest_runs (model_id, node, run_id) VALUES (%s, %s, %s)",
                    (m + 1, node, k * models + m + 1),
                )
        for table in ("models", "runs", "environments", "events"):
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def measure(store: Store, dsn: str, repeats: int) -> None:
    with psycopg.connect(dsn) as conn:
        count = conn.execute("SELECT count(*) FROM output_results").fetchone()
        print(f"output_results rows: {count[0] if count else 0:,}")
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        items = store.history("model-1", limit=200)
        timings.append((time.perf_counter() - started) * 1000)
    runs = sum(1 for i in items if i.run is not None)
    print(
        f"Store.history('model-1', limit=200): {len(items)} items ({runs} runs), "
        f"median {statistics.median(timings):.1f} ms, min {min(timings):.1f} ms, max {max(timings):.1f} ms "
        f"over {repeats} repeats (first: {timings[0]:.1f} ms)"
    )
    latest = []
    for _ in range(repeats):
        started = time.perf_counter()
        store.latest_per_model()
        latest.append((time.perf_counter() - started) * 1000)
    print(f"Store.latest_per_model(): median {statistics.median(latest):.1f} ms")
    # The run's error ÷ tolerance is read from its output rows: its share of history(), side by side.
    run_ids = [i.run.id for i in items if i.run is not None]
    ratio_ms = []
    for _ in range(repeats):
        with store._session() as session:
            started = time.perf_counter()
            queries.error_ratios(session, run_ids)
            ratio_ms.append((time.perf_counter() - started) * 1000)
    share = statistics.median(ratio_ms) / statistics.median(timings)
    print(
        f"queries.error_ratios({len(run_ids)} runs): median {statistics.median(ratio_ms):.1f} ms,"
        f" {share:.0%} of history()"
    )
    sql = history_runs_query(2, limit=200).compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
    with psycopg.connect(dsn) as conn:
        plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}").fetchall()
    print("EXPLAIN ANALYZE of the history query:")
    print("\n".join(f"  {row[0]}" for row in plan))


if __name__ == "__main__":
    main()
