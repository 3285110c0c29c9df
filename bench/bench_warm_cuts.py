"""Issue 29, round 3: a steady-state warm check with and without this round's cuts, in one process.

Run:  .venv/bin/python bench/bench_warm_cuts.py [--models a,b] [--checks 200] [--samples 16]

Between separate runs these machines drift by more than the cuts are worth (the same tree's
``check_job`` measured 3.0-4.7 ms for sk-logreg-nozipmap in six runs in a row), so the two sides
run in one process, on one workspace and one session per side, alternating check by check with a
bare ``sess.run`` loop of the same samples:

- before: ``KeptFiles`` without sample bundles (every sample's inputs and baseline outputs resolved
  and looked up file by file, as before), the CPU limit's cgroup file found again at every
  snapshot, the environment's variables read with ``items()``;
- after:  what ``KeptModels`` does now (``KeptFiles.bundle``, ``WarmProbes`` keeping
  ``cpu.quota_files``, ``envparts.env_entries`` reading only the matching values).

Printed per model: medians of bare, before and after, the time each adds to bare, after/before,
and whether every check's verdict and every output's metrics are identical between the sides.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_warm  # noqa: E402

from monitor.daemon import child  # noqa: E402
from monitor.files.stamped import KeptFiles, T  # noqa: E402
from monitor.runtime import cpu, envparts, envwarm  # noqa: E402
from monitor.runtime.gpu import Entries  # noqa: E402
from monitor.runtime.kept import KeptModels  # noqa: E402
from tests import realmodels  # noqa: E402


class Unbundled(KeptFiles):
    """Before: each sample's files resolved and looked up one by one (no bundle kept)."""

    def bundle(self, key: tuple[Any, ...], owner: object, build: Callable[[], dict[str, T]]) -> dict[str, T]:
        return build()


class UnkeptQuota(envwarm.WarmProbes):
    """Before: the cgroup limit's file found through ``/proc/self/cgroup`` and probes at every snapshot."""

    def cpu(self, proc_root: Path, sys_root: Path) -> Entries:
        if self._cpu_fixed is None:
            self._cpu_fixed = cpu.cpu_fixed_entries(proc_root)
        return {**self._cpu_fixed, **cpu.cpu_limit_entries(proc_root, sys_root)}


def env_entries_before(environ: Mapping[str, str]) -> Entries:
    """Before: every variable's value decoded (``items()``), the matching ones kept."""
    entries: Entries = {}
    for name, value in environ.items():
        if name in envparts.NUMERIC_ENV_NAMES or name.startswith(envparts.NUMERIC_ENV_PREFIXES):
            entries[f"env.{name}"] = (value, True)
    for field, names in envparts.K8S_ENV:
        identity = next((environ[n] for n in names if environ.get(n)), None)
        if identity is not None:
            entries[field] = (identity, False)
    return entries


def numbers(payload: Mapping[str, Any]) -> Any:
    result = child.result_of(payload)
    return str(result.verdict), [r.code for r in result.reasons], [o.metrics.to_dict() for o in result.outputs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="sk-logreg-nozipmap,surfaces-validity,torch-cnn-dynamo,voicefilter-lite")
    parser.add_argument("--checks", type=int, default=200)
    parser.add_argument("--samples", type=int, default=16)
    args = parser.parse_args()
    wanted = args.models.split(",")
    chosen = [m for m in realmodels.corpus_models() if m.name in wanted]
    scratch = Path(tempfile.mkdtemp(prefix="onnxmon-bench-cuts-"))
    real_env_entries = envparts.env_entries
    differ = 0
    print(f"{len(chosen)} models, {args.samples} samples, {args.checks} checks per side, alternating (medians)")
    header = f"{'model':<24}{'bare ms':>9}{'before ms':>11}{'(added)':>9}{'after ms':>10}{'(added)':>9}"
    print(f"{header}{'after/before':>14}")
    for model in chosen:
        plan = bench_warm.workspace(model, scratch / model.name, args.samples)
        after = KeptModels()
        before = KeptModels(files=Unbundled())
        before._probes = UnkeptQuota()

        def before_check(plan: Any = plan, kept: KeptModels = before) -> Any:
            envparts.env_entries = env_entries_before
            try:
                return child.check_job(plan, models=kept)
            finally:
                envparts.env_entries = real_env_entries

        def after_check(plan: Any = plan, kept: KeptModels = after) -> Any:
            return child.check_job(plan, models=kept)

        bare = bench_warm.bare_loop(plan)
        for _ in range(5):  # the first checks build the sessions and read every file
            before_check(), after_check(), bare()
        times: dict[str, list[float]] = {"bare": [], "before": [], "after": []}
        same = True
        for _ in range(args.checks):
            got = {}
            for side, fn in (("before", before_check), ("after", after_check), ("bare", bare)):
                began = time.perf_counter()
                got[side] = fn()
                times[side].append(time.perf_counter() - began)
            same = same and numbers(got["before"]) == numbers(got["after"])
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        differ += 0 if same else 1
        print(
            f"{model.name:<24}{med['bare']:>9.2f}{med['before']:>11.2f}{med['before'] - med['bare']:>+9.2f}"
            f"{med['after']:>10.2f}{med['after'] - med['bare']:>+9.2f}{med['after'] / med['before']:>13.3f}x"
            f"  {'same verdicts and metrics' if same else 'VERDICTS OR METRICS DIFFER'}"
        )
    print(f"models whose checks differ between the sides: {differ}")
    shutil.rmtree(scratch, ignore_errors=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
