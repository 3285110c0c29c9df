"""Steady-state check time, warm and fresh workers, against a bare ``InferenceSession.run`` of the same samples.

Run:  .venv/bin/python bench/bench_warm.py [--rounds 7] [--samples 16] [--models a,b,...]

Over the real-model corpus (``scripts/fetch-models``; ``ONNXMON_CORPUS_DIR`` as for the tests), each
model gets a throwaway workspace (a copy of the file, a generated benchmark set of ``--samples``
samples, a captured baseline). Then, interleaved in one process, round after round (these machines
are noisy: only ratios measured side by side mean anything):

- bare:  ``for feeds in samples: sess.run(None, feeds)`` (``repeats`` times each), inputs preloaded, a
         plain ``InferenceSession`` built with the check's own session options;
- warm:  one isolated check as the daemon runs it with ``daemon.worker: warm`` (``child.run_isolated``
         with a ``WarmPool``), timed from the daemon's side: the pipe both ways, the check inside the
         worker (hash-or-stamp the model, open and verify the benchmark set and the baseline, replay,
         compare, snapshot the environment), the result back;
- fresh: the same check in a fresh child (``daemon.worker: fresh``): fork, session build, model hash.

Every round's warm result is compared with the fresh one (verdict, reasons, every metric of every
output): any difference is printed and fails the run.

For warm it also prints where the time goes: the check inside the worker (``finished_at - started_at``),
of which the replay (``timings.replay_s``), and the rest (pipe and result decoding). Ratios are
medians over ``--rounds``; the geometric mean is over models. Goal: warm <= 1.15x bare.

Measured (2 shared cores, 2026-12-01, ``--rounds 5 --samples 16``)::

    27 models, 16 samples each, 5 rounds (medians)
    model                       bare ms  warm ms in-check  replay  fresh ms warm/bare fresh/bare
    voicefilter-embedder        1647.28  1865.16  1863.48 1751.71    3180.3     1.13x       1.9x  pass
    voicefilter-lite              56.19   188.31   181.29   80.87     714.2     3.35x      12.7x  pass
    surfaces-gbr                   0.68    91.47    78.58   37.40     960.5   133.70x    1404.0x  pass
    surfaces-knn-regressor         0.51    52.42    51.18   22.60     739.9   102.30x    1444.1x  pass
    surfaces-validity              0.38    63.33    61.88   15.43    1455.2   167.54x    3849.6x  pass
    tashkeel-bilstm              388.30   685.69   684.29  542.19    2699.1     1.77x       7.0x  pass
    tashkeel-rawi-ensemble       382.20   520.25   499.18  417.52    2164.6     1.36x       5.7x  pass
    tashkeel-rawi-v3             225.00   495.13   481.65  369.51    2423.5     2.20x      10.8x  pass
    sudachi-b                   1638.50  1795.17  1778.62 1575.94    3415.8     1.10x       2.1x  pass
    unidic-lite                 1253.81  1549.37  1502.97 1253.26    3727.7     1.24x       3.0x  pass
    silero-vad                    17.81   262.92   250.28  113.25    2542.8    14.76x     142.8x  pass
    romanizer-encoder             42.85   643.23   641.57  299.78    2696.4    15.01x      62.9x  pass
    romanizer-decoder             39.37   428.34   413.53  204.64    2907.7    10.88x      73.8x  pass
    vietcombank-captcha          383.55   653.91   632.04  512.42    2844.0     1.70x       7.4x  pass
    slovorez                      83.53   338.18   315.99  175.16    2623.1     4.05x      31.4x  pass
    traceforge-encoder           607.90   913.04   892.91  774.95    4144.5     1.50x       6.8x  pass
    traceforge-decoder           873.23  1264.35  1238.53  658.63    5857.1     1.45x       6.7x  pass
    captcha-external-data        344.86   800.48   787.00  459.69    2271.8     2.32x       6.6x  pass
    sk-logreg-zipmap               0.50   119.83   116.82   10.73    1588.4   238.22x    3157.8x  pass
    sk-logreg-nozipmap             0.45    58.89    57.32   18.62    1431.1   130.98x    3182.9x  pass
    sk-forest-regressor            0.33    60.29    51.71   20.17    1752.4   185.37x    5387.8x  pass
    sk-pipeline                    0.81   132.24   130.69   19.46    1950.9   163.20x    2407.7x  pass
    sk-logreg-strings              0.67    84.39    79.52   23.87    1508.4   126.24x    2256.5x  pass
    sk-tree-columns                0.58   102.56   101.02   32.50    1647.8   177.15x    2846.1x  pass
    torch-cnn-legacy              65.74   148.28   144.50  100.16    1953.8     2.26x      29.7x  pass
    torch-cnn-dynamo              51.65   194.11   186.78  120.85    1478.4     3.76x      28.6x  pass
    torch-encoder-dynamo           2.22   106.04   104.54   32.20    1525.8    47.73x     686.7x  pass
    geometric mean                                                                     11.51x      84.7x
    goal: warm <= 1.15x bare: NOT met
    verdicts and metric values, warm vs fresh: 0 model(s) differ (every row: "pass, same numbers as fresh")

Where the rest goes (cProfile of the check inside a warm worker): for the small models, per-check
fixed costs: path containment (``files.tensors.resolve_inside`` -> ``Path.resolve``, ~500 realpath
calls a check for romanizer-decoder: every tensor file of the manifest, every sample and baseline
output), npy header parsing (numpy's header reader, ``ast.literal_eval``), the environment snapshot
and compare's thread pool, started anew every check; for large outputs the metric suite's passes
(the fused kernel of issue 18 part 1). Cut here: the manifest's YAML parse (memoized by its text:
30-150 ms a check before), distribution versions (read once per process), the model hash (every
``daemon.rehash_every`` = 100 checks, else a stat stamp). Verifying the benchmark set and baseline
files once per stamp, like the model, would cut most of what is left, but they are verified at every
check by design.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import onnxruntime as ort  # noqa: E402

from monitor import capture, jsonsafe  # noqa: E402
from monitor.config.plan import CheckPlan, plan_for  # noqa: E402
from monitor.daemon import child, warm  # noqa: E402
from monitor.files import benchsets  # noqa: E402
from monitor.results import CheckResult  # noqa: E402
from monitor.runtime.session import provider_arguments, session_options  # noqa: E402
from tests import realmodels  # noqa: E402
from tests.workspace import Workspace  # noqa: E402

GOAL = 1.15
# ONNX Runtime's intra-op threads spin-wait for a while after a run: a pause between the loops keeps
# one side's spinning threads (this process's bare session, the worker's) off the other's cores.
PAUSE_S = 0.2


def workspace(model: realmodels.CorpusModel, root: Path, samples: int) -> CheckPlan:
    """A copy of ``model`` with a benchmark set of ``samples`` and a captured baseline; its plan."""
    pristine = realmodels.source_file(model)
    path = root / "models" / model.name / pristine.name
    path.parent.mkdir(parents=True)
    shutil.copyfile(pristine, path)
    if model.external_data:
        shutil.copyfile(pristine.parent / model.external_data, path.parent / model.external_data)
    ws = Workspace(root)
    generate = {**model.generate, "count": samples}
    ws.benchsets[model.name] = {
        "name": f"{model.name}-bench",
        "generate": {"model": str(path.relative_to(root)), "seed": 0, **generate},
    }
    ws.models[model.name] = {"name": model.name, "path": str(path.relative_to(root)), "benchset": f"{model.name}-bench"}
    plan = plan_for(ws.settings(), model.name)
    capture.capture_baseline(plan)
    return plan


def bare_loop(plan: CheckPlan) -> Callable[[], None]:
    names, options = provider_arguments(plan.model.providers)
    sess = ort.InferenceSession(
        str(plan.model.path),
        sess_options=session_options(plan.model.session, record_placement=False),
        providers=names or None,
        provider_options=options or None,
    )
    bench = benchsets.open_benchset(plan.benchsets_dir, plan.benchset.name)
    wanted = {i.name: i.type for i in sess.get_inputs()}
    feeds = []
    for index in range(len(bench)):
        sample = bench.load_sample(index)
        feeds.append({k: v.astype("float16") if wanted.get(k) == "tensor(float16)" else v for k, v in sample.items()})

    def bare() -> None:
        for f in feeds:
            for _ in range(plan.repeats):
                sess.run(None, f)

    return bare


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--models", default="", help="comma-separated corpus names (default: every model)")
    args = parser.parse_args()
    chosen = [m for m in realmodels.corpus_models() if not args.models or m.name in args.models.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="onnxmon-bench-warm-"))
    pool = warm.WarmPool(limit=len(chosen) + 1)
    rows = []
    mismatches = 0
    try:
        print(f"{len(chosen)} models, {args.samples} samples each, {args.rounds} rounds (medians)")
        print(
            f"{'model':<26}{'bare ms':>9}{'warm ms':>9}{'in-check':>9}{'replay':>8}"
            f"{'fresh ms':>10}{'warm/bare':>10}{'fresh/bare':>11}"
        )
        for model in chosen:
            plan = workspace(model, scratch / model.name, args.samples)
            bare = bare_loop(plan)
            times: dict[str, list[float]] = {"bare": [], "warm": [], "fresh": [], "inside": [], "replay": []}
            warm_result: list[CheckResult] = []
            fresh_result: list[CheckResult] = []

            def warm_check(plan: CheckPlan = plan, kept: list[CheckResult] = warm_result) -> None:
                kept.append(child.run_isolated(plan, pool=pool)[0])

            def fresh_check(plan: CheckPlan = plan, kept: list[CheckResult] = fresh_result) -> None:
                kept.append(child.run_isolated(plan)[0])

            bare(), warm_check(), fresh_check()  # warm-up: the worker and its session exist from here
            for _ in range(args.rounds):
                for name, fn in (("bare", bare), ("warm", warm_check), ("fresh", fresh_check)):
                    time.sleep(PAUSE_S)
                    began = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - began)
                result = warm_result[-1]
                times["inside"].append(result.finished_at - result.started_at)
                times["replay"].append(float(result.timings.get("replay_s", 0.0)))
            med = {k: statistics.median(v) * 1000 for k, v in times.items()}
            verdict = str(warm_result[-1].verdict)
            same = all(_numbers(w) == _numbers(f) for w, f in zip(warm_result, fresh_result, strict=True))
            verdict += ", same numbers as fresh" if same else ", NUMBERS DIFFER FROM FRESH"
            mismatches += 0 if same else 1
            rows.append((model.name, med["warm"] / med["bare"], med["fresh"] / med["bare"]))
            print(
                f"{model.name:<26}{med['bare']:>9.2f}{med['warm']:>9.2f}{med['inside']:>9.2f}{med['replay']:>8.2f}"
                f"{med['fresh']:>10.1f}{rows[-1][1]:>9.2f}x{rows[-1][2]:>10.1f}x  {verdict}"
            )
    finally:
        pool.close()
        shutil.rmtree(scratch, ignore_errors=True)
    warm_mean, fresh_mean = geomean([r[1] for r in rows]), geomean([r[2] for r in rows])
    print(f"{'geometric mean':<26}{'':>53}{warm_mean:>9.2f}x{fresh_mean:>10.1f}x")
    print(f"goal: warm <= {GOAL}x bare: {'met' if warm_mean <= GOAL else 'NOT met'}")
    print(f"verdicts and metric values, warm vs fresh: {mismatches} model(s) differ")
    return 0 if warm_mean <= GOAL and not mismatches else 1


def _numbers(result: CheckResult) -> str:
    """What must not depend on the worker mode: the verdict, reasons, and every output's metrics.

    As onnxmon's JSON, so that a NaN metric equals itself.
    """
    outputs = [(o.name, str(o.verdict), o.metrics.to_dict()) for o in result.outputs]
    return jsonsafe.dumps([str(result.verdict), [r.code for r in result.reasons], outputs])


if __name__ == "__main__":
    sys.exit(main())
