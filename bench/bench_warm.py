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

Measured (2 shared cores, 2026-12-01, ``--rounds 3 --samples 16``), after the benchmark set and
baseline were kept by stat stamp (``files/stamped.py``); before, the geometric mean was 11.51x::

    27 models, 16 samples each, 3 rounds (medians)
    model                       bare ms  warm ms in-check  replay  fresh ms warm/bare fresh/bare
    voicefilter-embedder         734.20   652.49   651.01  635.25    1583.3     0.89x       2.2x
    voicefilter-lite              75.87    79.23    76.60   52.92    2336.8     1.04x      30.8x
    surfaces-gbr                   0.52    15.36    13.04    5.41    1217.8    29.69x    2353.7x
    surfaces-knn-regressor         0.50    23.81    17.77    9.54    1605.1    47.47x    3200.3x
    surfaces-validity              0.43    48.43    34.46   15.91    2247.2   113.03x    5244.2x
    tashkeel-bilstm              409.41   541.49   518.03  471.29    1764.1     1.32x       4.3x
    tashkeel-rawi-ensemble       446.33   382.86   354.43  323.44    2060.2     0.86x       4.6x
    tashkeel-rawi-v3             147.57   289.72   285.45  248.15    1958.0     1.96x      13.3x
    sudachi-b                   1105.52  1642.83  1638.17 1509.57    4461.1     1.49x       4.0x
    unidic-lite                  896.31   917.34   915.94  863.71    3940.4     1.02x       4.4x
    silero-vad                     3.12    49.21    47.69   19.93    2012.7    15.79x     645.9x
    romanizer-encoder             31.14    58.32    56.53   19.69    1746.8     1.87x      56.1x
    romanizer-decoder              8.93    31.34    29.92   11.68     860.8     3.51x      96.4x
    vietcombank-captcha          335.54   352.46   345.95  302.74    2159.8     1.05x       6.4x
    slovorez                      48.07    87.63    73.31   67.93    1417.9     1.82x      29.5x
    traceforge-encoder           229.02   337.00   331.10  300.78    2332.8     1.47x      10.2x
    traceforge-decoder           216.91   261.47   259.68  197.90    1826.6     1.21x       8.4x
    captcha-external-data        130.81   216.66   215.02  180.54    1198.8     1.66x       9.2x
    sk-logreg-zipmap               0.54    17.45    15.67    4.62     968.5    32.54x    1805.8x
    sk-logreg-nozipmap             0.43     8.33     6.72    1.20    1214.6    19.32x    2818.2x
    sk-forest-regressor            0.38    10.00     6.20    1.29    1117.1    26.27x    2934.6x
    sk-pipeline                    0.66    40.32    30.58   15.58    1329.1    61.40x    2023.9x
    sk-logreg-strings              0.62    31.85    22.16    2.96    1552.4    51.60x    2514.8x
    sk-tree-columns                0.65    43.54    30.29   10.53     913.4    66.72x    1399.7x
    torch-cnn-legacy              11.23    76.41    59.11   52.65    1776.2     6.80x     158.1x
    torch-cnn-dynamo              29.54    61.33    55.20   43.89    1808.0     2.08x      61.2x
    torch-encoder-dynamo           2.40    20.94    18.40    3.48    1744.3     8.73x     727.4x
    geometric mean                                                                      5.55x     106.0x
    goal: warm <= 1.15x bare: NOT met
    verdicts and metric values, warm vs fresh: 0 model(s) differ (every row: "pass, same numbers as fresh")

(The machine was loaded by other work during this run: the large models' ratios swing 0.8-1.5x
between runs; the small models' fixed cost is the stable part.)

Where the rest goes (cProfile of a steady-state check inside a warm worker, surfaces-validity): no
file is read any more (``details.warm.files_read == 0``; the model, the set's and the baseline's
files are each one ``os.stat``; their manifests are kept parsed while their stamps hold). Left: the
replay's own per-sample path (``runtime/session.py``: feeds checked and cast, the timeout guard's
``threading.Timer`` started and cancelled every check), the environment snapshot's per-check probes
(``/proc/self/maps`` for the CUDA libraries mapped, CPU frequency and load from ``/proc`` and
``/sys``: what can change in a running process stays per check; ONNX Runtime, Python and OS are
probed once per worker), the baseline's ``baseline.json`` read (a promotion must be seen at once),
lint's cache file, and the pipe with the result's JSON. A long-lived watchdog thread instead of a
``Timer`` per check, and a stamp-kept ``baseline.json``, are the next cuts.

Issue 29 (2026-12-02, same machine, load average 10-13 from six other engineers' test runs;
``--rounds 9 --samples 16`` over six models, the same command before and after, the "before" from
the tree at f22121a): the watchdog is one thread (``runtime/watchdog.py``), ``ACTIVE``,
``baseline.json``, the baseline's element counts and the lint report are kept by stat stamp, a
sample is validated once for all its repeats, and the environment is probed as often as it can
change (``runtime/envwarm.py``: a warm snapshot 11.6 ms -> 0.31 ms, same fields and fingerprint)::

    model                     bare ms  warm ms (before)  in-check (before)  warm/bare (before)
    surfaces-validity            0.49    18.25 (13.74)      13.63 (11.95)      36.9x (31.6x)
    romanizer-encoder           79.19   158.04 (194.04)    150.17 (169.43)     2.00x (2.52x)
    vietcombank-captcha        447.81   476.50 (376.47)    463.51 (359.73)     1.06x (1.03x)
    sk-logreg-nozipmap           0.53    32.33 (63.42)      20.10 (45.76)      61.2x (126.7x)
    torch-cnn-dynamo            74.18   188.26 (232.36)    146.77 (215.81)     2.54x (2.63x)
    verdicts and metric values, warm vs fresh: 0 model(s) differ

At this load the rows swing by 2x between runs (in-process, one check of sk-logreg-nozipmap
measured 4.9 ms at a quieter moment and 23.8 ms at a busier one, beside a worker's 28.2 ms): the
figures say the direction, not the size. What is left in a sub-millisecond model's check (cProfile
inside a steady-state check, sk-logreg-nozipmap): the comparison's per-sample feed (~30 %), the
replay's per-sample loads of kept arrays and their stat stamps (~25 %, ~110 ``os.stat`` a check),
the runs themselves (~12 %), the snapshot's cgroup quota read (~7 %), the lint cache lookup
and reasons (~10 %). Reaching +2 ms needs a per-check stamp memo (one ``os.stat`` per file, not two
to four), a batched comparison of small outputs, and a quiet machine to show it.

Issue 29, round 2 (2026-12-02, load average 1.5-3, the same 2 shared cores): ``KeptFiles`` stats each
file once per check (a per-check stamp memo: 115 -> 64 ``os.stat`` a check for sk-logreg-nozipmap),
and a small output's sample goes straight into the stream's pending chunk (``compare/stream.py``; the
numbers were already measured in one vectorized pass per chunk, only the per-sample Python is cut).
Side by side in one process, alternating check by check on one workspace and session, the old
``KeptFiles`` and ``ChunkStream.feed`` (7334b82's, loaded from its tree) against the new, 300
checks each: sk-logreg-nozipmap 4.38 -> 3.81 ms (0.87x; again 3.99 -> 3.55, 0.89x),
surfaces-validity 5.04 -> 4.44 ms (0.88x), verdicts and every metric identical. Between separate
runs the difference drowns: a daemon's (``bench_warm_daemon.py --checks 10``, three runs before and three
after, alternating) sk-logreg-nozipmap +5.7/+5.1/+4.4 ms before, +3.9/+4.6/+5.2 ms after;
torch-cnn-dynamo 0.99x/0.79x/1.87x before, 1.45x/1.01x/1.55x after, its bare inference itself
swinging 8-22 ms between runs (noise, not a change). In
this script (``--rounds 7``): sk-logreg-nozipmap in-check 6.60 -> 6.62 ms, surfaces-validity 7.65
-> 6.38 ms, at load average ~2.

What is left (cProfile of 300 steady-state checks of sk-logreg-nozipmap in one process, after):
the replay 54 % (the comparison's per-sample feed 27 %: the baseline's kept arrays 14 %, the
accumulators 13 %; the run path 14 %, of which ONNX Runtime's own run 5 %; the set's kept inputs
8 %), the environment snapshot 16 % (the cgroup quota read 7.5 %, env vars 3 %), opening the
inputs 7 %, lint 5 %, the comparison's finish 5 %, details and the result 8 %. It is Python per
sample (~150 us profiled, 16 samples) and per check, spread thin: no single cut is left that
halves it. A check after an idle gap (the daemon's every few seconds) costs ~1.5x one back to back
(cold caches: 3.4 -> 5.6 ms in-process), which is what the daemon measures. Reaching +2 ms needs
the per-sample work done once per check: one kept bundle per sample (its arrays and the stamps of
its files, one lookup instead of a resolve and a load per file), the baseline's small outputs
concatenated per output once (fed as one array per check), and a cheaper cgroup quota read (one
open of the known ``cpu.max``, not ``/proc/self/cgroup`` and two probes first).

Issue 29, round 3 (2026-12-03, load average 0.8-1.9, the same 2 shared cores, no other work): a
sample's inputs and its baseline outputs are each one kept bundle (``KeptFiles.bundle``: one lookup
and one stamp comparison per file while the kept manifest / ``baseline.json`` is the same object),
the CPU limit's cgroup file is found once per refresh and read with one ``os.read`` (the CPU probe
190 -> 20 us), and the snapshot decodes only the environment variables it records (77 -> 44 us).
Side by side in one process, alternating check by check with the same code minus those cuts
(``bench/bench_warm_cuts.py``, 200 checks per side)::

    model                     bare ms  before ms  (added)  after ms  (added)  after/before
    voicefilter-lite            26.27      34.25    +7.98     34.10    +7.83        0.996x
    surfaces-validity            0.24       3.59    +3.35      2.93    +2.69        0.815x
    sk-logreg-nozipmap           0.25       3.68    +3.43      2.90    +2.65        0.790x
    torch-cnn-dynamo             6.21       9.87    +3.66      9.12    +2.90        0.923x
    (same verdicts and metrics on every check)

This script afterwards (``--rounds 5``, all 27 models, quiet machine): geometric mean **2.57x**
(5.55x on 2026-12-01 at a higher load); of the 17 models whose bare inference takes >= 10 ms, 5 are
within 1.05x (voicefilter-embedder 1.01x, slovorez 0.98x, traceforge-encoder 1.00x,
captcha-external-data 1.00x, torch-cnn-legacy 1.03x), 5 more within 1.2x (sudachi-b 1.06x,
traceforge-decoder 1.07x, unidic-lite 1.14x, tashkeel-bilstm 1.17x, torch-cnn-dynamo 1.20x), the
rest 1.26-1.75x; the sub-millisecond models add +4.5 to +9.8 ms (in-check +2.8 to +7.4 ms).
Verdicts and metrics identical to fresh on all 27. The daemon (``bench_warm_daemon.py``, the tree
before and after, alternating, two runs each): sk-logreg-nozipmap +3.68/+3.95 -> +3.22/+4.00 ms,
torch-cnn-dynamo (6 ms bare) 3.15x/1.70x -> 2.63x/2.00x: between runs the noise is as large as the cut.

Issue 29, round 4 (2026-12-03, quiet machine, load average 0.2-0.6): a worker keeps the plan it was
started for, so only its first check pickles one (a null check's round trip after a 0.3 s idle gap
1.32 -> 0.62 ms); the worker's memory figures come from one read of ``/proc/self/statm``; a session
remembers the input layouts that fitted its signature; a set's list of versions is kept on its
directory's stamp (a check opened the set twice, listing and stat'ing every version both times); the
lint cache's directory path is built once. Two warm pools in one process, one emulating 29c13d5,
alternating check by check after the same 0.2 s idle gap (``bench/bench_warm_round4.py``, 60 checks
per side, two runs)::

    model                 bare ms   check: before -> after (ratio), run 1; run 2
    sk-logreg-nozipmap       0.61   6.92 -> 5.64 (0.82x); 7.28 -> 6.53 (0.90x)
    surfaces-validity        0.70   9.48 -> 9.55 (1.01x); 7.65 -> 6.83 (0.89x)
    torch-cnn-dynamo         9.54   16.15 -> 14.98 (0.93x); 13.41 -> 11.98 (0.89x)
    romanizer-encoder       18.81   30.85 -> 26.08 (0.85x); 22.74 -> 20.47 (0.90x)
    vietcombank-captcha     61.98   71.86 -> 70.11 (0.98x); 76.44 -> 71.13 (0.93x)

    model                 recorded duration: before -> after (ratio), run 1; run 2
    sk-logreg-nozipmap      5.07 -> 4.38 (0.86x); 5.28 -> 5.17 (0.98x)
    surfaces-validity       7.38 -> 7.07 (0.96x); 5.63 -> 5.28 (0.94x)
    torch-cnn-dynamo        14.11 -> 13.72 (0.97x); 11.41 -> 10.89 (0.95x)
    romanizer-encoder       27.97 -> 24.86 (0.89x); 20.60 -> 19.04 (0.92x)
    vietcombank-captcha     69.43 -> 68.50 (0.99x); 73.99 -> 69.44 (0.94x)
    (same verdicts and metrics on every check)

This script afterwards (``--rounds 5``, all 27 models): geometric mean **2.31x** (2.57x in round 3);
of the 17 models whose bare inference takes >= 10 ms, 7 are within 1.05x (voicefilter-embedder 0.96x,
sudachi-b 0.96x, unidic-lite 0.97x, romanizer-decoder 0.91x, traceforge-encoder 0.94x, torch-cnn-legacy
0.77x, torch-cnn-dynamo 1.05x), 6 more within 1.15x (tashkeel-rawi-v3 1.05x, captcha-external-data
1.06x, tashkeel-rawi-ensemble 1.09x, traceforge-decoder 1.11x, vietcombank-captcha 1.12x,
romanizer-encoder 1.13x), the rest 1.20-1.34x (slovorez, tashkeel-bilstm, voicefilter-lite); the
sub-millisecond models add +4.7 to +8.5 ms (their bare loop, cold after the pause, took 0.7-0.8 ms in
this run). Verdicts and metrics identical to fresh
on all 27. Between separate runs of this script the same model moves by 10-40 % (romanizer-encoder
1.13x, 1.49x and 1.11x in three runs of this tree within twenty minutes, vietcombank-captcha 1.12x,
1.25x and 1.23x), which is why the cuts are measured with two pools side by side. The daemon
(``bench_warm_daemon.py --checks 10``, 29c13d5 and this tree alternating, two runs each):
sk-logreg-nozipmap +5.21/+4.79 -> +4.98/+3.93 ms per check.

Measured and not kept this round:

- the worker's own inference is at most a few per cent slower than the bench's: a bare ``sess.run``
  loop in a forkserver child (the warm worker's kind of process) measured 0.93-1.09x the same loop in
  this process (two runs, four and five models, 15-20 loops each; median 1.03x), not round 3's 1.2x,
  which was run-to-run noise;
- running every sample back to back and comparing the held outputs afterwards (ONNX Runtime's threads
  fall asleep and the caches go cold when a comparison runs between two runs: a 0.02 ms model's run took
  47 us back to back and 103 us with 150 us of other work between runs): sk-logreg-nozipmap's recorded
  check 5.25 -> 4.99 ms, but torch-cnn-dynamo 11.2 -> 11.6 ms and silero-vad unchanged (the runs
  themselves got slower back to back for the 1-10 ms models, 8.1 -> 8.7 ms): reverted.

What is left, and why neither goal is met (phases timed inside a warm worker after a 0.3 s idle gap,
sk-logreg-nozipmap, 16 samples, bare 0.25-0.7 ms):

- the replay, 2.4 ms: ONNX Runtime's runs 0.66 ms (41 us each, against 14-20 us back to back in a tight
  loop: cold caches and sleeping threads), the session wrapper 0.2 ms, the kept inputs 0.26 ms and kept
  baseline outputs 0.39 ms (one ``os.stat`` per file, ~6 us cold, is most of it: the stamp rule), the
  comparison's per-sample feed 0.64 ms (~20 us per output per sample cold);
- opening the inputs 0.42 ms, the snapshot 0.35 ms, the comparison's finish 0.23 ms, the environment
  diff 0.13 ms, details and the result 0.3 ms, lint and export checks 0.2 ms;
- outside the check (what the bench's "warm ms" adds to "in-check"): the pipe both ways, its two
  wake-ups after an idle gap, and the result's ``to_dict`` / ``from_dict`` (~0.35 ms);
- tried and reverted (round 3): comparing sample ``i`` on a helper thread while sample ``i+1`` runs.

Reaching +2 ms needs the per-sample Python gone (the replay loop and the comparison's feed in native
code, or one vectorized pass per check where the model's outputs allow it) and the stamp rule paid per
directory (inotify on local file systems, with the per-file ``os.stat`` kept where inotify cannot see a
change: network file systems, a full watch table); the >= 10 ms models that miss 1.05x are those of
10-70 ms whose fixed per-check cost, 2-5 ms, is more than 5 % of their inference.

Issue 29, round 5 (2026-12-04, quiet machine, load average 0.0-0.7; this machine ran the same models
2-6x faster than on 12-01, so the ">= 10 ms" set is now 14 models). This round:

- the comparison answered from the last check's when every output keeps its bits
  (``compare/memo.py``): one ``memcmp`` per output against the last check's held outputs (within
  32 MiB) and the baseline's arrays matched by identity (the worker's kept, stamp-verified arrays,
  weakly referenced), instead of the accumulators' per-sample feed and the metric pass; the first
  difference compares in full, the samples before it fed from the held outputs. Every corpus model's
  steady-state checks were answered from it (``comparison reused 5/5`` on all 27 rows below);
- the ``CheckResult`` crosses the pipe as it is (no ``to_dict`` in the worker, no ``from_dict`` in
  the daemon), a request's bytes are pickled once per job, the worker's liveness is one ``select`` of
  its sentinel and its answer one ``poll`` over the pipe and the sentinel.

Side by side, two warm pools in one process alternating check by check after a 0.2 s gap, one with
88c7cc0's path (``bench/bench_warm_round5.py --checks 40``, seven models; "check" is what the daemon
waits for, "recorded" the worker's ``finished_at - started_at``)::

    model                 bare ms   check ms before -> after (added)          recorded ms before -> after (added)
    surfaces-validity        0.46     3.73 ->   3.03 0.813x (+3.27 -> +2.57)     2.63 ->   2.11 0.800x (+2.17 -> +1.64)
    unidic-lite             71.75    81.30 ->  75.06 0.923x (+9.55 -> +3.31)    79.86 ->  74.14 0.928x (+8.12 -> +2.39)
    romanizer-encoder        6.11    12.06 ->   9.56 0.793x (+5.96 -> +3.45)    10.87 ->   8.68 0.799x (+4.76 -> +2.57)
    vietcombank-captcha     22.42    27.55 ->  26.13 0.949x (+5.13 -> +3.72)    26.38 ->  25.17 0.954x (+3.96 -> +2.75)
    sk-logreg-nozipmap       0.50     3.70 ->   2.93 0.792x (+3.19 -> +2.43)     2.57 ->   2.00 0.779x (+2.06 -> +1.50)
    sk-pipeline              0.71     4.42 ->   3.57 0.809x (+3.70 -> +2.86)     3.23 ->   2.59 0.801x (+2.51 -> +1.87)
    torch-cnn-dynamo         4.06     7.17 ->   6.58 0.919x (+3.10 -> +2.52)     6.07 ->   5.63 0.927x (+2.01 -> +1.57)
    (memo 40/40 and the same verdicts and metrics on every check of every model)

A real ``onnxmon serve`` (``bench/bench_warm_daemon.py --checks 10``, 88c7cc0's tree and this one
alternating, two runs each; the recorded ``duration_s`` against bare inference): sk-logreg-nozipmap
+1.96 / +2.10 -> **+1.50 / +1.54 ms**, surfaces-validity +1.88 / +1.89 -> **+1.42 / +1.58 ms** (goal
<= +2 ms: met); vietcombank-captcha 1.45x / 1.17x -> 1.09x / 1.13x; unidic-lite 1.04x / 1.04x ->
1.05x / 1.07x (its bare loop itself moved 70-77 ms between runs: within the noise, where the side by
side above says 0.93x).

This script (``--rounds 5``, all 27 models; the whole check as the daemon waits for it): geometric mean
**2.03x** (2.31x in round 4); of the 14 models whose bare inference takes >= 10 ms, **9** within 1.05x
(voicefilter-embedder 1.02, voicefilter-lite 0.89, tashkeel-bilstm 0.95, tashkeel-rawi-ensemble 0.92,
romanizer-encoder 0.89, vietcombank-captcha 0.93, slovorez 0.87, traceforge-encoder 0.92,
traceforge-decoder 0.97, torch-cnn-legacy 0.65), the rest 1.06-1.18x (sudachi-b 1.06, unidic-lite
1.07, captcha-external-data 1.16, tashkeel-rawi-v3 1.18; ratios below 1 say the bare loop in this
process drifts by +-15 % between rounds too); sub-ms models +2.7 to +3.3 ms whole (one outlier +4.3),
of which +1.6 to +2.2 ms recorded inside the worker; verdicts and metrics identical to fresh on all 27.

Where a sub-ms model's remaining ~2.4 ms goes (sk-logreg-nozipmap after a 0.3 s gap; bare 0.45 ms):
the round trip ~0.9 ms (a null job's round trip through the pool is ~0.65 ms after an idle gap: the
daemon's own cold path to the send ~0.35 ms, the worker's wake-up ~0.15 ms, the way back ~0.16 ms,
all the OS and a cold interpreter; the result's pickle ~0.2 ms); inside the check ~1.5 ms: opening the
inputs 0.44, the snapshot 0.31, the per-sample kept inputs and baseline outputs 0.34 (52 ``os.stat``
a check: the stamp rule; skipping them all, as a measurement only, saved 0.21 ms), the result's
assembly and details 0.2, lint 0.12, the environment diff 0.08, the replay loop and the memo's
``memcmp`` ~0.25. Hot (back to back) the same check adds ~1.1 ms: most of the rest is cold caches
after the idle gap. Measured and left: inotify instead of the per-file stat (0.2 ms at most, and it
misses what the stat rule sees: a hard link written elsewhere, a network file system, a ConfigMap's
symlink swap before the old directory goes); the watchdog's notify per check (~30 us). What +2 ms
for the whole round trip still needs is ~0.4-0.7 ms out of the cold per-check Python, i.e. the
check's fixed steps in fewer, native passes; the >= 10 ms models that miss 1.05x are within the bare
loop's own drift.
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
from dataclasses import dataclass
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

GOAL = 1.15  # the geometric mean over the corpus (issue 25)
RATIO_GOAL = 1.05  # issue 29: warm <= 1.05x bare for a model whose inference takes >= 10 ms
ADDED_GOAL_MS = 2.0  # issue 29: warm - bare <= 2 ms for a model whose inference takes < 1 ms
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


@dataclass
class SideBySide:
    """Two (or more) ways of checking one model, alternating with a bare loop after the same idle gap."""

    total: dict[str, list[float]]  # per side and "bare": each call's seconds, as the caller waits for it
    inside: dict[str, list[float]]  # per side: each result's recorded duration (finished_at - started_at)
    results: list[dict[str, CheckResult]]  # per round: each side's result

    def same(self, one: str, other: str) -> bool:
        """Whether every round's verdict, reasons and metrics are identical between two sides."""
        return all(numbers(got[one]) == numbers(got[other]) for got in self.results)

    def medians_ms(self) -> tuple[dict[str, float], dict[str, float]]:
        """Medians of ``total`` and ``inside``, in milliseconds."""
        return (
            {k: statistics.median(v) * 1000 for k, v in self.total.items()},
            {k: statistics.median(v) * 1000 for k, v in self.inside.items()},
        )


def side_by_side(
    sides: dict[str, Callable[[], CheckResult]], bare: Callable[[], None], *, rounds: int, gap: float, warmup: int = 3
) -> SideBySide:
    """``rounds`` rounds of every side then ``bare``, each call after ``gap`` idle seconds (the daemon's
    checks come after an idle gap); ``warmup`` untimed rounds first (sessions built, files read)."""
    for _ in range(warmup):
        for check in sides.values():
            check()
        bare()
    measured = SideBySide({"bare": [], **{side: [] for side in sides}}, {side: [] for side in sides}, [])
    for _ in range(rounds):
        got: dict[str, CheckResult] = {}
        for side, call in [*sides.items(), ("bare", bare)]:
            time.sleep(gap)
            began = time.perf_counter()
            answer = call()
            measured.total[side].append(time.perf_counter() - began)
            if isinstance(answer, CheckResult):
                got[side] = answer
                measured.inside[side].append(answer.finished_at - answer.started_at)
        measured.results.append(got)
    return measured


def round_arguments(doc: str) -> tuple[argparse.Namespace, list[realmodels.CorpusModel]]:
    """The options of a two-sides bench (``bench_warm_round4.py``, ``bench_warm_round5.py``) and its models."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    default = "sk-logreg-nozipmap,surfaces-validity,torch-cnn-dynamo,romanizer-encoder,vietcombank-captcha"
    parser.add_argument("--models", default=default)
    parser.add_argument("--checks", type=int, default=60)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--gap", type=float, default=0.2, help="idle seconds before every timed call")
    args = parser.parse_args()
    wanted = args.models.split(",")
    return args, [m for m in realmodels.corpus_models() if m.name in wanted]


def run_isolated_result(plan: CheckPlan, pool: warm.WarmPool) -> CheckResult:
    """One check as the daemon runs it with ``pool``: its result."""
    return child.run_isolated(plan, pool=pool)[0]


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
    goals_missed = 0
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
            same = all(numbers(w) == numbers(f) for w, f in zip(warm_result, fresh_result, strict=True))
            verdict += ", same numbers as fresh" if same else ", NUMBERS DIFFER FROM FRESH"
            reused = sum(1 for w in warm_result[1:] if (w.details.get("warm") or {}).get("comparison_reused"))
            verdict += f", comparison reused {reused}/{len(warm_result) - 1}"
            mismatches += 0 if same else 1
            rows.append((model.name, med["warm"] / med["bare"], med["fresh"] / med["bare"]))
            goal = _goal(med["bare"], med["warm"])
            goals_missed += 1 if goal.endswith("NOT met") else 0
            print(
                f"{model.name:<26}{med['bare']:>9.2f}{med['warm']:>9.2f}{med['inside']:>9.2f}{med['replay']:>8.2f}"
                f"{med['fresh']:>10.1f}{rows[-1][1]:>9.2f}x{rows[-1][2]:>10.1f}x  {verdict}; {goal}"
            )
    finally:
        pool.close()
        shutil.rmtree(scratch, ignore_errors=True)
    warm_mean, fresh_mean = geomean([r[1] for r in rows]), geomean([r[2] for r in rows])
    print(f"{'geometric mean':<26}{'':>53}{warm_mean:>9.2f}x{fresh_mean:>10.1f}x")
    print(f"goal: warm <= {GOAL}x bare: {'met' if warm_mean <= GOAL else 'NOT met'}")
    print(f"verdicts and metric values, warm vs fresh: {mismatches} model(s) differ")
    print(f"per-model goals (<= {RATIO_GOAL}x from 10 ms, <= +{ADDED_GOAL_MS:g} ms under 1 ms): {goals_missed} missed")
    return 0 if warm_mean <= GOAL and not mismatches else 1


def _goal(bare_ms: float, warm_ms: float) -> str:
    """Issue 29's goal for this model, by how long its bare inference takes, and whether it is met."""
    if bare_ms >= 10:
        return f"<= {RATIO_GOAL}x: {'met' if warm_ms / bare_ms <= RATIO_GOAL else 'NOT met'}"
    if bare_ms < 1:
        added = warm_ms - bare_ms
        return f"+{added:.1f} ms <= +{ADDED_GOAL_MS:g}: {'met' if added <= ADDED_GOAL_MS else 'NOT met'}"
    return "no goal (1-10 ms)"


def numbers(result: CheckResult) -> str:
    """What must not depend on the worker mode: the verdict, reasons, and every output's metrics.

    As onnxmon's JSON, so that a NaN metric equals itself.
    """
    outputs = [(o.name, str(o.verdict), o.metrics.to_dict()) for o in result.outputs]
    return jsonsafe.dumps([str(result.verdict), [r.code for r in result.reasons], outputs])


if __name__ == "__main__":
    sys.exit(main())
