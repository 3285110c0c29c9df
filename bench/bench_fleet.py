"""The fleet vote at scale on PostgreSQL: ``onnxmon fleet`` over 1,000 nodes x 100 models <= 1 s, one node's
own vote (``fleet/own.py``, what each daemon runs after its check) <= 20 ms.

Creates a scratch database (``onnxmon_fleet_bench``), migrates it with ``Store.upgrade()``, fills it with
COPY: per model, every node's latest run (its digests: 1 output x 16 samples, its run digest, its stack:
90 % of the nodes on one stack key, 10 % on another ONNX Runtime release, one node per model with one
sample flipped) and ``--history`` older runs per node, the ``latest_runs`` pointers; ``VACUUM ANALYZE``;
then times, warm, the whole fleet's vote (``fleet.report.vote``: what ``onnxmon fleet`` and
``/api/v1/fleet`` compute) and one node's own vote, and checks they found what was planted. The database is
dropped at the end unless ``--keep``.

    .venv/bin/python bench/bench_fleet.py [--server postgresql+psycopg://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import xxhash
from sqlalchemy import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.config.settings import from_mapping
from monitor.fleet import own, report
from monitor.store import Store

SAMPLES = 16


def stack(version: str, model: int) -> dict[str, str]:
    return {
        "onnxruntime.version": version,
        "onnxruntime.build_info": f"git-branch=rel-{version}",
        "session.providers": "CUDAExecutionProvider,CPUExecutionProvider",
        "session.provider_options": '{"CUDAExecutionProvider":{"cudnn_conv_algo_search":"DEFAULT"}}',
        "session.options": '{"deterministic_compute":true,"intra_op_num_threads":1}',
        "gpu.0.name": "NVIDIA H100 80GB HBM3",
        "gpu.0.sm_count": "132",
        "gpu.0.mig_profile": "none",
        "nvml.driver_version": "570.86.15",
        "cuda.cudnn.version": "9.8.0",
        "model.sha256": f"{model:064x}",
        "benchset.name": f"set-{model}",
        "benchset.version": "1",
    }


def digests(seed: str, flip: int | None = None) -> tuple[str, str]:
    samples = [xxhash.xxh3_128_hexdigest(f"{seed}/{i}".encode()) for i in range(SAMPLES)]
    if flip is not None:
        samples[flip] = "f" * 32
    document = [{"name": "logits", "samples": samples, "total": 1.0, "magnitude": 1.0, "elements": 16000}]
    run = xxhash.xxh3_128()
    run.update(f"logits\x00{','.join(samples)}\x01".encode())
    return json.dumps(document), run.hexdigest()


def key(fields: dict[str, str]) -> str:
    return xxhash.xxh3_128_hexdigest(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())


def fill(dsn: str, nodes: int, models: int, history: int, now: datetime) -> None:
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy("COPY models (id, name, first_seen, last_seen) FROM STDIN") as copy:
            for m in range(models):
                copy.write_row((m + 1, f"model-{m:03d}", now, now))
        columns = (
            "id, model_id, node, started_at, finished_at, duration_s, verdict, reasons, sample_count,"
            " providers_requested, providers_effective, timings, details, digests, run_digest, stack, stack_key"
        )
        latest: list[tuple[int, str, int]] = []
        with cur.copy(f"COPY runs ({columns}) FROM STDIN") as copy:
            run_id = 0
            for m in range(models):
                stacks = {v: stack(v, m) for v in ("1.32.0", "1.20.1")}
                keys = {v: key(s) for v, s in stacks.items()}
                documents = {v: digests(f"{m}/{v}") for v in stacks}
                odd = digests(f"{m}/1.32.0", flip=m % SAMPLES)
                for n in range(nodes):
                    version = "1.20.1" if n % 10 == 9 else "1.32.0"
                    document, run_digest = odd if n == m % (nodes - 1) and version == "1.32.0" else documents[version]
                    for age in range(history, -1, -1):
                        run_id += 1
                        at = now - timedelta(minutes=5 * age + 1)
                        copy.write_row(
                            (
                                run_id, m + 1, f"gpu-{n:04d}", at, at + timedelta(seconds=2), 2.0, "pass", "[]",
                                SAMPLES, "[]", "[]", "{}", "{}", document, run_digest,
                                json.dumps(stacks[version]), keys[version],
                            )
                        )  # fmt: skip
                    latest.append((m + 1, f"gpu-{n:04d}", run_id))
        with cur.copy("COPY latest_runs (model_id, node, run_id) FROM STDIN") as copy:
            for row in latest:
                copy.write_row(row)
        for table in ("models", "runs"):
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def timed(fn: object, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--database", default="onnxmon_fleet_bench")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--history", type=int, default=2, help="Older runs per node and model.")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    server = make_url(args.server)
    admin_dsn = server.set(drivername="postgresql").render_as_string(hide_password=False)
    bench_url = server.set(database=args.database).render_as_string(hide_password=False)
    bench_dsn = server.set(drivername="postgresql", database=args.database).render_as_string(hide_password=False)
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{args.database}"')
    now = datetime.now(UTC)
    settings = from_mapping({}, origin=Path("/nonexistent/onnxmon.yaml"))
    try:
        with Store(bench_url) as store:
            store.upgrade()
            began = time.perf_counter()
            fill(bench_dsn, args.nodes, args.models, args.history, now)
            total = args.nodes * args.models * (args.history + 1)
            spent = time.perf_counter() - began
            print(f"filled {total:,} runs ({args.nodes} nodes x {args.models} models) in {spent:.1f} s")
            votes = report.vote(store, settings, now)
            kinds = sorted({(o.kind, len(v.groups)) for v in votes for o in v.outliers})
            outliers = sum(len(v.outliers) for v in votes)
            print(f"vote found {outliers:,} outliers over {len(votes)} models; kinds and groups: {kinds}")
            assert len(votes) == args.models and all(len(v.groups) == 2 for v in votes)
            fleet_s = timed(lambda: report.vote(store, settings, now), args.repeats)
            node = "gpu-0001"  # agrees on every model but model-001 (its odd node)
            own_s = timed(lambda: own.vote_own(store, settings, "model-050", node, now), args.repeats * 3)
            print(f"onnxmon fleet (every model):  {fleet_s * 1000:8.1f} ms  (goal <= 1000 ms)")
            print(f"one node's own vote:          {own_s * 1000:8.1f} ms  (goal <= 20 ms)")
    finally:
        if not args.keep:
            with psycopg.connect(admin_dsn, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')


if __name__ == "__main__":
    main()
