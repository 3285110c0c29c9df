"""Benchmark: onnxmon's localization against Polygraphy on a ~200-node model with one perturbed weight.

1. Time to name the first divergent node: ``polygraphy debug reduce --mode bisect`` driven by a
   check script that compares the reduced subgraph with the reference's intermediates stored in a
   file, using our threshold (as a user would write it), and, side by side in the same run, ours:
   against the baseline's stored intermediates (the same setting as Polygraphy's: the reference
   values are on disk; ``bisect`` and ``all``), and against the reference *model*, which we run:
   with its noise floor measured (the reference run twice per fetch: ``noisefloor.forget()``
   before the call) and with the floor kept from an earlier localization of the same reference
   file and input (one run per fetch), interleaved, medians of ``REPEATS``; the two must give the
   same first divergent node and ranking.
2. Peak memory (RSS high-water of a child process) of our ``all`` mode with ``chunk_size=16``
   vs ``polygraphy run --onnx-outputs mark all --onnxrt``, and of a plain inference run.
3. Where our time goes (``--profile``): session creation, inference, comparison.

Polygraphy is a bench-only dependency (``pip install polygraphy sympy onnx-graphsurgeon``: its
``debug reduce`` needs both, and onnxruntime 1.32 no longer brings sympy); without it, only our
numbers are printed, and a reduce that fails prints no ratio. Run: ``.venv/bin/python bench/bench_localize.py``.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.config.settings import ProviderSpec, SessionConfig  # noqa: E402
from monitor.localize import noisefloor  # noqa: E402
from monitor.localize.engine import LEVEL_KEY, LocalizationReport, capture_intermediates, localize  # noqa: E402
from monitor.localize.request import LocalizeRequest  # noqa: E402
from tests import modelzoo  # noqa: E402

WIDTH, LAYERS, BATCH = 256, 66, 2048  # 3*66+1 = 199 nodes; each activation is 2 MiB
PERTURBED = "w30"  # consumed by matmul_30
CPU = [ProviderSpec(name="CPUExecutionProvider")]
REPEATS = 3

CHECK_SCRIPT = """
import sys
import numpy as np
import onnx
import onnxruntime as ort

model = onnx.load(sys.argv[1])
reference = np.load(sys.argv[2])
weights = {t.name for t in model.graph.initializer}
feeds = {i.name: reference[i.name] for i in model.graph.input if i.name not in weights}
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
names = [o.name for o in session.get_outputs()]
for name, value in zip(names, session.run(None, feeds)):
    want = reference[name].astype(np.float64)
    scale = max(float(np.std(want)), 1e-6 / 0.01)
    if np.max(np.abs(value.astype(np.float64) - want)) > 0.01 * scale:
        sys.exit(1)
"""

MEASURE_OURS = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.localize.engine import localize
from monitor.localize.request import LocalizeRequest
feeds = {{"x": np.load({inputs!r})["x"]}}
report = localize({subject!r}, feeds, LocalizeRequest(reference_model={reference!r}, mode="all", chunk_size=16),
                  providers=[ProviderSpec(name="CPUExecutionProvider")], session=SessionConfig())
print(report.summary())
"""

MEASURE_PLAIN = """
import numpy as np, onnxruntime as ort
session = ort.InferenceSession({subject!r}, providers=["CPUExecutionProvider"])
session.run(None, {{"x": np.load({inputs!r})["x"]}})
"""


def build(workdir: Path) -> tuple[Path, Path, dict[str, np.ndarray]]:
    model = modelzoo.deep_mlp(seed=1, width=WIDTH, layers=LAYERS)
    reference = modelzoo.save(model, workdir / "reference.onnx")
    for i, init in enumerate(model.graph.initializer):
        if init.name == PERTURBED:  # scale the whole matrix by 10%: the change persists to the output
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 1.1, init.name))
    subject = modelzoo.save(model, workdir / "subject.onnx")
    feeds = {"x": np.random.default_rng(0).normal(0, 1, (BATCH, WIDTH)).astype(np.float32)}
    np.savez(workdir / "inputs.npz", **feeds)
    return subject, reference, feeds


LAUNCHER = """
import resource, subprocess, sys, time
started = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, time.perf_counter() - started)
print(lines[-1] if lines else f"exit {done.returncode}")
"""


def peak_rss_mib(command: list[str], cwd: Path) -> tuple[float, float, str]:
    """(peak RSS MiB, seconds, last output line) of one child process.

    Measured by a small launcher: a child forked straight from this (large) process would
    inherit its RSS high-water mark across ``exec``.
    """
    done = subprocess.run([sys.executable, "-c", LAUNCHER, *command], cwd=cwd, capture_output=True, text=True)
    first, last = [*done.stdout.strip().splitlines(), "", ""][:2]
    rss, seconds = (float(v) for v in first.split())
    return rss, seconds, last


def profile(subject: Path, feeds: dict[str, np.ndarray], stored: dict[str, np.ndarray]) -> None:
    """Where one localization against stored intermediates spends its time, by the functions that matter."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    localize(
        subject,
        feeds,
        LocalizeRequest(against="baseline"),
        providers=CPU,
        session=SessionConfig(),
        reference_intermediates=stored,
    )
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = max(stats.total_tt, 1e-9)  # type: ignore[attr-defined]
    wanted = {
        "session creation": ("session.py", "__init__"),
        "inference": ("session.py", "run"),
        "comparison": ("rule.py", "measure"),
        "serializing exposed graphs": ("onnx/__init__.py", "save_model"),
        "shape inference": ("graph.py", "value_types"),
    }
    for label, (file, function) in wanted.items():
        seconds = sum(
            row[3] for (path, _, name), row in stats.stats.items()  # type: ignore[attr-defined]
            if path.endswith(file) and name == function
        )  # fmt: skip
        print(f"  profile: {label:28s} {seconds:6.2f} s  ({seconds / total:5.1%})")
    print(f"  profile: total                        {total:6.2f} s")


def _first(report: LocalizationReport) -> str | None:
    return report.first.name if report.first else None


def _ranking(report: LocalizationReport) -> list[str]:
    return [node.name for node in report.top]


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="onnxmon-bench-localize-"))
    subject, reference, feeds = build(workdir)
    nodes = len(onnx.load(str(subject)).graph.node)
    print(f"model: deep_mlp {nodes} nodes, activations {BATCH}x{WIDTH} float32, perturbed {PERTURBED}")

    started = time.perf_counter()
    stored = capture_intermediates(reference, feeds, providers=CPU, session=SessionConfig())
    print(
        f"baseline capture of the reference's intermediates (once, at baseline time):"
        f" {time.perf_counter() - started:.2f} s"
    )
    ours: dict[str, float] = {}
    for mode in ("bisect", "all"):  # against the stored intermediates: the reference does not run
        times = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            report = localize(
                subject, feeds, LocalizeRequest(against="baseline", mode=mode), providers=CPU, session=SessionConfig(),
                reference_intermediates=stored,
            )  # fmt: skip
            times.append(time.perf_counter() - started)
        print(
            f"ours vs baseline {mode:6s}: median of {REPEATS} {statistics.median(times):6.2f} s"
            f"  inferences {report.runs:3d}  first divergent node {_first(report)} ({report.comparison})"
        )
        ours[f"baseline {mode}"] = statistics.median(times)
    for mode in ("bisect", "all"):  # against the reference model, which runs: its floor measured vs kept
        request = LocalizeRequest(reference_model=reference, mode=mode)
        noisefloor.forget()
        started = time.perf_counter()
        cold = localize(subject, feeds, request, providers=CPU, session=SessionConfig())
        first_call = time.perf_counter() - started
        fresh_times, kept_times = [], []
        for _ in range(REPEATS):  # interleaved: the machine's load falls on both alike
            noisefloor.forget()  # the reference's floor measured again (two runs per fetch)
            started = time.perf_counter()
            fresh = localize(subject, feeds, request, providers=CPU, session=SessionConfig())
            fresh_times.append(time.perf_counter() - started)
            started = time.perf_counter()  # the floor the fresh call measured is kept: one run per fetch
            kept = localize(subject, feeds, request, providers=CPU, session=SessionConfig())
            kept_times.append(time.perf_counter() - started)
            same = (_first(kept), _ranking(kept)) == (_first(fresh), _ranking(fresh)) == (_first(cold), _ranking(cold))
            if not same:
                raise SystemExit(f"the kept floor changed the answer: {_first(kept)} vs {_first(fresh)}")
        fresh_s, kept_s = statistics.median(fresh_times), statistics.median(kept_times)
        print(
            f"ours vs model    {mode:6s}: first call {first_call:6.2f} s; median of {REPEATS} interleaved:"
            f" floor measured {fresh_s:6.2f} s ({fresh.runs} inferences), floor kept {kept_s:6.2f} s"
            f" ({kept.runs} inferences), kept/measured {kept_s / fresh_s:.3f};"
            f" first divergent node {_first(kept)}, top {len(kept.top)} ranking identical"
        )
        ours[f"model {mode}, floor measured"] = fresh_s
        ours[f"model {mode}, floor kept"] = kept_s

    if "--profile" in sys.argv:
        profile(subject, feeds, stored)
    polygraphy = shutil.which("polygraphy", path=str(Path(sys.executable).parent)) or shutil.which("polygraphy")
    if polygraphy is None:
        print("polygraphy not installed: skipping the comparison (pip install polygraphy)")
    else:
        reference_values = capture_intermediates(
            reference, feeds, providers=CPU, session=SessionConfig(graph_optimization_level="disable")
        )
        reference_values.pop(LEVEL_KEY)
        np.savez(workdir / "reference_intermediates.npz", **reference_values, **feeds)
        (workdir / "check.py").write_text(CHECK_SCRIPT)
        command = [
            polygraphy, "debug", "reduce", str(subject), "-o", "reduced.onnx", "--mode", "bisect",
            "--model-input-shapes", f"x:[{BATCH},{WIDTH}]",
            "--check", sys.executable, "check.py", "polygraphy_debug.onnx", "reference_intermediates.npz",
        ]  # fmt: skip
        started = time.perf_counter()
        result = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        if result.returncode != 0:
            print((result.stdout + result.stderr)[-3000:])
        reduced_path = workdir / "reduced.onnx"
        found = [n.name for n in onnx.load(str(reduced_path)).graph.node] if reduced_path.is_file() else None
        print(f"polygraphy debug reduce --mode bisect: {elapsed:7.2f} s  exit {result.returncode}  reduced to {found}")
        if result.returncode != 0 or not found:
            # A reduce that stopped early (sympy or onnx_graphsurgeon missing: onnxruntime >= 1.32 no
            # longer brings sympy) would make every ratio below look like a win: none is printed.
            print("  no ratio: polygraphy did not reduce the model (pip install sympy onnx-graphsurgeon)")
        for key, seconds in ours.items() if result.returncode == 0 and found else ():
            print(f"  ours vs {key} / polygraphy = {seconds / elapsed:.3f}  (goal <= 0.1)")

    ours_code = MEASURE_OURS.format(
        root=str(ROOT), inputs=str(workdir / "inputs.npz"), subject=str(subject), reference=str(reference)
    )
    plain = MEASURE_PLAIN.format(subject=str(subject), inputs=str(workdir / "inputs.npz"))
    rss, seconds, line = peak_rss_mib([sys.executable, "-c", plain], workdir)
    print(f"peak RSS plain inference:             {rss:7.1f} MiB  {seconds:6.2f} s")
    rss, seconds, line = peak_rss_mib([sys.executable, "-c", ours_code], workdir)
    print(f"peak RSS ours all, chunk_size=16:     {rss:7.1f} MiB  {seconds:6.2f} s  ({line})")
    if polygraphy is not None:
        command = [
            polygraphy, "run", str(subject), "--onnxrt", "--onnx-outputs", "mark", "all",
            "--input-shapes", f"x:[{BATCH},{WIDTH}]",
        ]  # fmt: skip
        rss, seconds, line = peak_rss_mib(command, workdir)
        print(f"peak RSS polygraphy run mark all:     {rss:7.1f} MiB  {seconds:6.2f} s")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
