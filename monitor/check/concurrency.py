"""``models[].checks.concurrency: N``: the serial answers against the same session called from N threads at once.

Why: servers call ``run()`` on one session from many threads. A custom op, an execution provider or a
model with state that is not thread-safe answers differently when calls overlap, which no serial
replay can see. The rule: the serial replay (the check itself) keeps a digest of every answer
(``SerialDigests``, 16 bytes per output and sample: ``compare/bitwise.py``); then the benchmark set is
replayed through the *same* session from N threads, each sample ``PASSES`` times, interleaved, a
barrier per round (``runtime/concurrent.py``); every concurrent answer's digest must equal the serial
one. Compared as they arrive, so memory holds one answer per thread, plus the first differing answer
of each output (at most ``KEPT``) to say by how much: that sample is run serially once more after the
concurrent replay, and the two are compared element by element (``bitwise.difference``). When that
serial re-run differs from the first serial answer too, the model is not even serially deterministic,
and the details say so (``serial_rerun_bitwise: false``).

What it finds goes to ``details["concurrency"]`` (``details.ConcurrencyDetails``: threads, calls, how
many overlapped, per differing output the samples) and, through ``reasons.concurrency_reasons``, to
``concurrency_variant`` reasons (verdict ``fail``). The concurrent replay shares the check's deadline;
running out of it is a ``timeout`` reason (verdict ``error``) that keeps the serial measurement, as
is anything else that stops it (``internal_error``: a thread that cannot start under the memory cap).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from monitor.check.reasons import concurrency_reasons
from monitor.compare import bitwise
from monitor.details import ConcurrencyDetails, ConcurrencyOutput
from monitor.files import benchsets
from monitor.results import Reason
from monitor.runtime import concurrent
from monitor.runtime.session import Deadline, RunTimeout, Session

PASSES = concurrent.PASSES
KEPT = 8  # differing answers kept to measure (the first of each output)
MOST_SAMPLES = 100  # sample indices listed per output


class SerialDigests:
    """Fed by the serial replay: each sample's answer as a digest per output (``bitwise.digest``)."""

    def __init__(self) -> None:
        self.by_sample: dict[int, dict[str, bytes]] = {}

    def feed(self, index: int, outputs: Mapping[str, np.ndarray]) -> None:
        self.by_sample[index] = bitwise.digests(outputs)


@dataclass(frozen=True)
class Concurrency:
    """What the concurrent replay found: its reasons (none when every answer is the serial one) and its record."""

    reasons: tuple[Reason, ...] = ()
    details: ConcurrencyDetails = field(default_factory=lambda: ConcurrencyDetails())


@dataclass
class _Found:
    """Differences as they arrive from the threads, under one lock."""

    serial: SerialDigests
    lock: threading.Lock = field(default_factory=threading.Lock)
    differing: dict[str, ConcurrencyOutput] = field(default_factory=dict)
    samples: dict[str, set[int]] = field(default_factory=dict)
    kept: dict[str, tuple[int, np.ndarray]] = field(default_factory=dict)

    def compare(self, sample: int, outputs: Mapping[str, np.ndarray]) -> None:
        wanted = self.serial.by_sample.get(sample, {})
        for name in sorted(set(wanted) | set(outputs)):
            value = outputs.get(name)
            if value is not None and wanted.get(name) == bitwise.digest(value):
                continue
            with self.lock:
                entry = self.differing.setdefault(name, ConcurrencyOutput(answers_differing=0))
                entry["answers_differing"] = entry.get("answers_differing", 0) + 1
                self.samples.setdefault(name, set()).add(sample)
                if value is not None and name not in self.kept and len(self.kept) < KEPT:
                    self.kept[name] = (sample, np.array(value, copy=True))


def check_concurrency(
    session: Session,
    bench: benchsets.Benchset,
    serial: SerialDigests,
    *,
    threads: int,
    timeout_s: float | None,
) -> Concurrency:
    """Replay ``bench`` through ``session`` from ``threads`` threads and compare with ``serial``; never raises
    a timeout (it is a reason)."""
    rounds = concurrent.schedule(len(bench), threads, PASSES)
    found = _Found(serial)
    where = f"checks.concurrency ({threads} threads)"
    try:
        if timeout_s is not None and timeout_s <= 0:
            raise RunTimeout("the serial replay used the whole timeout")
        with Deadline(timeout_s) as guard:
            ran = concurrent.replay_concurrently(
                session, rounds, load=bench.load_sample, each=found.compare, guard=guard, where=where
            )
            _measure_kept(session, bench, found, guard)
    except RunTimeout as exc:
        note = f"{where}: not finished within the check's timeout: {exc}"
        return Concurrency((Reason("timeout", note),), ConcurrencyDetails(threads=threads, passes=PASSES, note=note))
    except Exception as exc:  # a thread that cannot start under the memory cap, a bug: the serial result stays
        note = f"{where}: {type(exc).__name__}: {exc}"[:2000]
        stopped = ConcurrencyDetails(threads=threads, passes=PASSES, note=note)
        return Concurrency((Reason("internal_error", note),), stopped)
    details = ConcurrencyDetails(
        threads=threads,
        passes=PASSES,
        rounds=ran.rounds,
        calls=ran.calls,
        overlapped_calls=ran.overlapped_calls,
        max_in_flight=ran.max_in_flight,
        seconds=round(ran.seconds, 4),
        differing={
            name: {**entry, "samples": sorted(found.samples[name])[:MOST_SAMPLES]}
            for name, entry in sorted(found.differing.items())
        },
        failures=[{"sample": f.sample, "error": f.error} for f in ran.failures[:MOST_SAMPLES]],
    )
    if ran.overlapped_calls == 0:
        details["note"] = (
            "no call overlapped another (each ended before the next began): nothing ran concurrently,"
            " so nothing was tested under concurrency"
        )
    return Concurrency(tuple(concurrency_reasons(details)), details)


def _measure_kept(session: Session, bench: benchsets.Benchset, found: _Found, guard: Deadline) -> None:
    """For each kept differing answer: its sample once more, serially, against it element by element."""
    for name, (sample, answer) in sorted(found.kept.items()):
        again = session.run(bench.load_sample(sample), guard=guard, where=f"checks.concurrency: sample {sample}")
        entry = found.differing[name]
        entry["first_sample"] = sample
        rerun = again.get(name)
        if rerun is None:
            continue
        entry["serial_rerun_bitwise"] = bitwise.digest(rerun) == found.serial.by_sample.get(sample, {}).get(name)
        measured = bitwise.difference(answer, rerun)
        entry["elements_differing"] = measured.elements_differing
        entry["elements"] = measured.elements
        if measured.max_abs_difference is not None:
            entry["max_abs_difference"] = measured.max_abs_difference
        if measured.shape_or_dtype:
            entry["shape_or_dtype"] = measured.shape_or_dtype
