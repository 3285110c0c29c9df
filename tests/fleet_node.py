"""One fleet node, as its daemon runs each cycle: check, record, vote for itself (tests/test_fleet_e2e.py).

Run as ``python -m tests.fleet_node CONFIG MODEL CYCLES [PORT]`` with ``ONNXMON_NODE_NAME`` set; prints one
JSON line per cycle: the verdict, the run digest and what the node's own vote found of it. With ``PORT``, it
then serves its last cycle's fleet series on ``/metrics`` there until its stdin closes (a scrape target).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server

from monitor.check import run_check
from monitor.config.identity import identity
from monitor.config.plan import plan_for
from monitor.config.settings import load
from monitor.daemon import fleetvote
from monitor.sinks.prometheus.fleet_gauges import FleetGauges
from monitor.store import Store, fleet_rows


def main(config: str, model: str, cycles: int, port: int | None = None) -> None:
    settings = load(Path(config))
    plan = plan_for(settings, model)
    node = identity().node
    assert node, "ONNXMON_NODE_NAME is not set"
    with Store.configured(settings.store) as store:
        for _ in range(cycles):
            result = run_check(plan)
            run_id = store.record_run(result, node=node)
            registry = CollectorRegistry()
            fleetvote.after_check(
                plan, result, run_id, settings=settings, store=store, node=node, gauges=FleetGauges(registry)
            )
            mine = [o for o in fleet_rows.outliers(store, model=model) if o.node == node]
            consistent = registry.get_sample_value("onnxmon_fleet_consistent", {"model": model})
            line = {
                "verdict": result.verdict.value,
                "run_digest": result.run_digest,
                "kind": mine[0].kind if mine else None,
                "consistent": consistent,
            }
            print(json.dumps(line), flush=True)
    if port is not None:
        start_http_server(port, addr="127.0.0.1", registry=registry)
        print(json.dumps({"serving": port}), flush=True)
        sys.stdin.read()  # until the test closes it


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else None)
