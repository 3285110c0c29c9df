"""The check worker's goals, measured side by side in one run: session builds, steady overhead, worker RSS.

Run:  .venv/bin/python bench/bench_worker.py [--models a,b] [--checks 20] [--samples 16] [--no-example]

For the bundled example (``onnxmon.yaml``'s ``tinynet``) and every model of the real-model corpus
(``tests/realmodels.py``; a throwaway workspace of ``--samples`` samples and a captured baseline
each), ``--checks`` checks go through the daemon's own path (``daemon.child.run_isolated`` with a
``WarmPool``: the model's kept check worker), each after an idle gap, alternating with a bare loop
of the same samples (plain ``onnxruntime.InferenceSession.run`` in this process, same session
options, same repeats). Per model it prints:

- builds: sessions the worker built over the checks (``details.worker.session_built``; the counter
  ``onnxmon_worker_session_builds_total`` counts the same). Goal: 1.
- steady overhead: the median check (the first one left out: it builds the session), as the daemon
  waits for it, against the median bare loop. Goal: check <= max(bare + 50 ms, 1.2 x bare). Beside
  it, "inside": the check's own recorded duration in the worker (``finished_at - started_at``).
- worker RSS: the kept worker's resident set after the checks (``/proc/PID/status``), against a
  bare process holding the same session (a fresh interpreter importing only numpy and onnxruntime,
  the session built and run once on the first sample) plus one sample's bytes (its inputs, its
  outputs and the baseline's outputs). Goal: worker <= bare process + one sample + 100 MiB.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from monitor import capture  # noqa: E402
from monitor.config import settings  # noqa: E402
from monitor.config.plan import CheckPlan, plan_for  # noqa: E402
from monitor.daemon import child, warm  # noqa: E402
from monitor.files import baselines, benchsets  # noqa: E402
from monitor.results import CheckResult, Verdict  # noqa: E402
from monitor.runtime.session import provider_arguments, session_options  # noqa: E402
from tests import realmodels  # noqa: E402
from tests.workspace import Workspace  # noqa: E402

MiB = 1024 * 1024
OVERHEAD_MS, OVERHEAD_RATIO = 50.0, 1.2
RSS_SLACK = 100 * MiB
# ONNX Runtime's intra-op threads spin-wait for a while after a run: a pause between the loops keeps
# one side's spinning threads (this process's bare session, the worker's) off the other's cores.
PAUSE_S = 0.2

BARE_PROCESS = """
import json, sys
import numpy as np, onnxruntime as ort
spec = json.loads(sys.argv[1])
options = ort.SessionOptions()
levels = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
options.graph_optimization_level = levels[spec["level"]]
options.intra_op_num_threads, options.inter_op_num_threads = spec["intra"], spec["inter"]
session = ort.InferenceSession(spec["model"], sess_options=options, providers=spec["providers"])
feeds = dict(np.load(spec["sample"], allow_pickle=False))
session.run(None, feeds)
for line in open("/proc/self/status"):
    if line.startswith("VmRSS:"):
        print(int(line.split()[1]) * 1024)
"""


@dataclass
class Row:
    name: str
    builds: int
    checks: int
    bare_ms: float
    check_ms: float
    inside_ms: float  # the check's own recorded duration, inside the worker
    worker_rss: int
    bare_rss: int
    sample_bytes: int
    verdict: str

    @property
    def overhead_ok(self) -> bool:
        return self.check_ms <= max(self.bare_ms + OVERHEAD_MS, OVERHEAD_RATIO * self.bare_ms)

    @property
    def rss_ok(self) -> bool:
        return self.worker_rss <= self.bare_rss + self.sample_bytes + RSS_SLACK


def workspace(model: realmodels.CorpusModel, root: Path, samples: int) -> CheckPlan:
    """A copy of ``model`` with a benchmark set of ``samples`` and a captured baseline; its plan."""
    return corpus_workspace(model, root, samples)[0]


def corpus_workspace(
    model: realmodels.CorpusModel, root: Path, samples: int, daemon: dict[str, Any] | None = None, **fields: Any
) -> tuple[CheckPlan, Workspace]:
    """``workspace``'s files, the model's config ``fields`` (a schedule, a timeout) and ``daemon`` section added."""
    pristine = realmodels.source_file(model)
    path = root / "models" / model.name / pristine.name
    path.parent.mkdir(parents=True)
    shutil.copyfile(pristine, path)
    if model.external_data:
        shutil.copyfile(pristine.parent / model.external_data, path.parent / model.external_data)
    ws = Workspace(root)
    ws.benchsets[model.name] = {
        "name": f"{model.name}-bench",
        "generate": {"model": str(path.relative_to(root)), "seed": 0, **model.generate, "count": samples},
    }
    ws.models[model.name] = {
        "name": model.name,
        "path": str(path.relative_to(root)),
        "benchset": f"{model.name}-bench",
        **fields,
    }
    if daemon is not None:
        ws.extra["daemon"] = daemon
    plan = plan_for(ws.settings(), model.name)
    capture.capture_baseline(plan)
    return plan, ws


def bare_loop(plan: CheckPlan) -> Callable[[], None]:
    """Plain ``InferenceSession.run`` over the plan's benchmark set, ``repeats`` times each sample."""
    names, options = provider_arguments(plan.model.providers)
    sess = ort.InferenceSession(
        str(plan.model.path),
        sess_options=session_options(plan.model.session, record_placement=False),
        providers=names or None,
        provider_options=options or None,
    )
    wanted = {i.name: i.type for i in sess.get_inputs()}
    feeds = []
    for sample in _samples(plan):
        feeds.append({k: v.astype("float16") if wanted.get(k) == "tensor(float16)" else v for k, v in sample.items()})

    def bare() -> None:
        for f in feeds:
            for _ in range(plan.repeats):
                sess.run(None, f)

    return bare


def measure(name: str, plan: CheckPlan, checks: int, scratch: Path) -> Row:
    pool = warm.WarmPool(limit=1)
    bare = bare_loop(plan)
    results: list[CheckResult] = []
    took: dict[str, list[float]] = {"check": [], "bare": []}
    try:
        bare()
        for _ in range(checks):
            for side in ("check", "bare"):
                time.sleep(PAUSE_S)
                began = time.perf_counter()
                if side == "check":
                    results.append(child.run_isolated(plan, pool=pool)[0])
                else:
                    bare()
                took[side].append(time.perf_counter() - began)
        pid = pool.pids().get(plan.name)
        worker_rss = _rss(pid) if pid is not None else 0
    finally:
        pool.close()
    builds = sum(1 for r in results if (r.details.get("worker") or {}).get("session_built") is True)
    verdicts = {str(r.verdict) for r in results}
    bad = [r for r in results if r.verdict is Verdict.ERROR]
    verdict = ",".join(sorted(verdicts))
    if bad:
        verdict += f" ({bad[0].reasons[0].code}: {bad[0].reasons[0].detail[:80]})"
    return Row(
        name=name,
        builds=builds,
        checks=len(results),
        bare_ms=statistics.median(took["bare"][1:]) * 1000,
        check_ms=statistics.median(took["check"][1:]) * 1000,
        inside_ms=statistics.median(r.finished_at - r.started_at for r in results[1:]) * 1000,
        worker_rss=worker_rss,
        bare_rss=_bare_process_rss(plan, scratch),
        sample_bytes=_sample_bytes(plan),
        verdict=verdict,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated corpus names (default: every model)")
    parser.add_argument("--checks", type=int, default=20)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--no-example", action="store_true", help="leave out the bundled example")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    wanted = [m for m in args.models.split(",") if m]
    chosen = [m for m in realmodels.corpus_models() if not wanted or m.name in wanted]
    scratch = Path(tempfile.mkdtemp(prefix="onnxmon-bench-worker-"))
    rows: list[Row] = []
    print(f"{len(chosen)} corpus models ({args.samples} samples) + the example, {args.checks} checks each (medians)")
    header = f"{'model':<26}{'builds':>7}{'bare ms':>9}{'check ms':>10}{'inside':>8}{'ratio':>7}{'added':>8}"
    print(header + f"{'worker MiB':>11}{'bare MiB':>9}{'sample':>8}{'slack':>7}  overhead / RSS / verdicts")
    try:
        if not args.no_example:
            example = plan_for(settings.load(ROOT / "onnxmon.yaml", environ={}), "tinynet")
            rows.append(_print(measure("example: tinynet", example, args.checks, scratch)))
        for model in chosen:
            plan = workspace(model, scratch / model.name, args.samples)
            rows.append(_print(measure(model.name, plan, args.checks, scratch)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    builds_ok = sum(1 for r in rows if r.builds == 1)
    overhead_ok = sum(1 for r in rows if r.overhead_ok)
    rss_ok = sum(1 for r in rows if r.rss_ok)
    worst = max(rows, key=lambda r: r.check_ms - r.bare_ms)
    print(f"session builds == 1 over {args.checks} checks: {builds_ok}/{len(rows)} models")
    print(
        f"steady overhead <= max({OVERHEAD_MS:g} ms, {OVERHEAD_RATIO}x bare): {overhead_ok}/{len(rows)} models;"
        f" most added: {worst.check_ms - worst.bare_ms:.1f} ms ({worst.name},"
        f" {worst.check_ms:.1f} vs {worst.bare_ms:.1f} ms);"
        f" added, median over models: {statistics.median(r.check_ms - r.bare_ms for r in rows):.1f} ms"
    )
    slack = [(r.worker_rss - r.bare_rss - r.sample_bytes) / MiB for r in rows]
    print(
        f"worker RSS <= bare session process + one sample + {RSS_SLACK // MiB} MiB: {rss_ok}/{len(rows)} models;"
        f" worker minus (bare + sample): median {statistics.median(slack):.0f} MiB, most {max(slack):.0f} MiB"
    )
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    return 0 if builds_ok == overhead_ok == rss_ok == len(rows) else 1


def _print(row: Row) -> Row:
    added = row.check_ms - row.bare_ms
    slack = (row.worker_rss - row.bare_rss - row.sample_bytes) / MiB
    print(
        f"{row.name[:25]:<26}{row.builds:>4}/{row.checks:<2}{row.bare_ms:>9.2f}{row.check_ms:>10.2f}{row.inside_ms:>8.1f}"
        f"{row.check_ms / row.bare_ms:>6.2f}x{added:>8.1f}{row.worker_rss / MiB:>11.0f}{row.bare_rss / MiB:>9.0f}"
        f"{row.sample_bytes / MiB:>8.1f}{slack:>7.0f}  {'met' if row.overhead_ok else 'NOT met'}"
        f" / {'met' if row.rss_ok else 'NOT met'} / {row.verdict}",
        flush=True,
    )
    return row


def _samples(plan: CheckPlan) -> list[dict[str, np.ndarray]]:
    baseline = baselines.active(plan.baselines_dir, plan.name)
    assert baseline is not None, f"{plan.name} has no active baseline"
    bench = benchsets.open_benchset(plan.benchsets_dir, baseline.meta.benchset, baseline.meta.benchset_version)
    return [bench.load_sample(index) for index in range(len(bench))]


def _sample_bytes(plan: CheckPlan) -> int:
    """One sample's inputs, its outputs and the baseline's outputs (the largest sample of the set)."""
    baseline = baselines.active(plan.baselines_dir, plan.name)
    assert baseline is not None
    sizes = []
    for index, sample in enumerate(_samples(plan)):
        outputs = sum(a.nbytes for a in baseline.sample_outputs(index).values())
        sizes.append(sum(a.nbytes for a in sample.values()) + 2 * outputs)
    return max(sizes)


def _bare_process_rss(plan: CheckPlan, scratch: Path) -> int:
    """RSS of a fresh interpreter that imports numpy and onnxruntime, builds the session and runs one sample."""
    sample = scratch / f"{plan.name}-sample0.npz"
    sess = ort.InferenceSession(str(plan.model.path), providers=["CPUExecutionProvider"])
    wanted = {i.name: i.type for i in sess.get_inputs()}
    first = _samples(plan)[0]
    np.savez(sample, **{k: v.astype("float16") if wanted.get(k) == "tensor(float16)" else v for k, v in first.items()})
    cfg = plan.model.session
    spec = {
        "model": str(plan.model.path),
        "sample": str(sample),
        "level": cfg.graph_optimization_level,
        "intra": cfg.intra_op_num_threads,
        "inter": cfg.inter_op_num_threads,
        "providers": provider_arguments(plan.model.providers)[0] or ["CPUExecutionProvider"],
    }
    done = subprocess.run(
        [sys.executable, "-c", BARE_PROCESS, json.dumps(spec)], capture_output=True, text=True, timeout=600, check=True
    )
    return int(done.stdout.split()[-1])


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
