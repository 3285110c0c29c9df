"""Create baselines: capture on this stack, capture a reference run, or import outputs.

A captured baseline records everything a later check needs to trust it: the model's
hashes, the exact benchmark-set version, the session and provider settings actually in
effect, and the environment snapshot taken after the first inference (cuDNN loads
lazily). The first baseline of a model becomes active; later ones become active only
when promoted (``--promote`` or ``onnxmon baseline promote``), so a new capture is never
silently promoted over an existing baseline.

Each sample's outputs are written into the baseline's temporary directory as soon as they
exist (``files/baseline_writer.py``), so memory holds one sample, not the benchmark set; the
baseline still appears atomically, with the same ids and checksums as before.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from monitor import jsonsafe, modeldiff
from monitor.config.plan import CheckPlan
from monitor.config.settings import ModelConfig, ProviderSpec, SessionConfig
from monitor.errors import BaselineError, MonitorError
from monitor.files import baseline_writer, baselines, modelfile, tensors
from monitor.files import benchsets as benchset
from monitor.runtime import envsnap
from monitor.runtime.session import Session

Progress = Callable[[int, int], None]
IntermediateCapture = Callable[[Session, Mapping[str, np.ndarray]], dict[str, np.ndarray]]

REFERENCE_PROVIDERS = (ProviderSpec(name="CPUExecutionProvider"),)
REFERENCE_SESSION = SessionConfig(graph_optimization_level="disable", intra_op_num_threads=1)


def capture_baseline(
    plan: CheckPlan,
    *,
    reference: bool = False,
    promote: bool = False,
    intermediate_samples: int = 0,
    note: str = "",
    progress: Progress | None = None,
    capture_env: Callable[[], envsnap.EnvSnapshot] = envsnap.capture,
    capture_intermediates: IntermediateCapture | None = None,
) -> baselines.Baseline:
    """Run ``plan``'s benchmark set and store the outputs as a new baseline.

    ``reference=True`` runs on the CPU provider with graph optimizations disabled (source
    ``reference``) instead of the configured production session (source ``captured``).
    ``intermediate_samples`` > 0 also stores every intermediate tensor of that many samples,
    for layer-by-layer localization after an upgrade.
    """
    model = plan.model
    bench = benchset.ensure(plan.benchset, plan.benchsets_dir)
    providers: Sequence[ProviderSpec] = REFERENCE_PROVIDERS if reference else model.providers
    session_cfg = REFERENCE_SESSION if reference else model.session
    session = Session(model.path, providers, session_cfg)
    # Each sample's outputs go to disk as soon as they exist: memory holds one sample, not the set.
    with baseline_writer.BaselineWriter(plan.baselines_dir, model.name) as writer:
        for index in range(len(bench)):
            feeds = bench.load_sample(index)
            writer.add_sample(session.run(feeds, where=f"benchset {bench.name!r} sample {index}"))
            if index < intermediate_samples:
                grab = capture_intermediates or _default_intermediates(model, providers, session_cfg)
                writer.add_intermediates(index, grab(session, feeds))
            if progress:
                progress(index + 1, len(bench))
        meta = _meta(model, bench, session, "reference" if reference else "captured", capture_env(), note)
        return _store(plan, meta, writer, promote)


def import_baseline(
    plan: CheckPlan,
    files: Sequence[Path],
    *,
    kind: Literal["npz", "onnx-test-data"] = "npz",
    promote: bool = False,
    note: str = "",
) -> baselines.Baseline:
    """Store reference outputs produced elsewhere (e.g. PyTorch outputs saved as npz).

    ``npz``: one file per benchmark sample, in sample order, keys = model output names.
    ``onnx-test-data``: a directory of ``test_data_set_N/output_K.pb``.
    """
    model = plan.model
    bench = benchset.ensure(plan.benchset, plan.benchsets_dir)
    session = Session(model.path, model.providers, model.session)
    samples: Iterable[Mapping[str, np.ndarray]]
    if kind == "onnx-test-data":
        if len(files) != 1:
            raise BaselineError("onnx-test-data import takes exactly one directory")
        samples = benchset.read_onnx_test_outputs(files[0], output_names=session.output_names)
        count = len(samples)
    else:
        samples, count = (_read_npz(path) for path in files), len(files)  # read one file at a time
    if count != len(bench):
        raise BaselineError(
            f"import for {model.name!r}: {count} output sample(s) given, benchset"
            f" {bench.name!r} v{bench.version} has {len(bench)} sample(s); give one per sample, in order"
        )
    wanted = set(session.output_names)
    with baseline_writer.BaselineWriter(plan.baselines_dir, model.name) as writer:
        for index, sample in enumerate(samples):
            if set(sample) != wanted:
                raise BaselineError(
                    f"import for {model.name!r}: sample {index} has outputs {sorted(sample)}, model outputs are"
                    f" {sorted(wanted)}"
                )
            writer.add_sample({name: sample[name] for name in session.output_names})
        meta = _meta(model, bench, session, "imported", envsnap.capture(), note)
        return _store(plan, meta, writer, promote)


def _meta(
    model: ModelConfig,
    bench: benchset.Benchset,
    session: Session,
    source: baselines.Source,
    snapshot: envsnap.EnvSnapshot,
    note: str,
) -> baselines.BaselineMeta:
    identity = modelfile.identify(model.path)
    session_facts: dict[str, Any] = session.info.to_dict() | {"options": model.session.model_dump(mode="json")}
    return baselines.BaselineMeta(
        id="",
        model=model.name,
        created_at=jsonsafe.timestamp(dt.datetime.now(dt.UTC)),
        source=source,
        model_sha256=identity.sha256,
        model_md5=identity.md5,
        external_data=identity.external_data,
        benchset=bench.name,
        benchset_version=bench.version,
        benchset_sha256=bench.sha256,
        session=session_facts,
        environment=snapshot.to_dict(),
        note=note,
    )


def _store(
    plan: CheckPlan, meta: baselines.BaselineMeta, writer: baseline_writer.BaselineWriter, promote: bool
) -> baselines.Baseline:
    """Commit the written samples as a baseline; the model's first baseline becomes active."""
    root = plan.baselines_dir
    first = baselines.active_id(root, plan.name) is None
    described = model_manifest(plan.model.path)
    if described is not None:
        writer.add_document(baselines.MODEL_MANIFEST, described)
    baseline = writer.commit(meta)
    if promote or first:
        baselines.promote(root, baseline.id, by="capture --promote" if promote else "first baseline")
    return baseline


def model_manifest(path: Path) -> dict[str, Any] | None:
    """The static description of the model file (``modeldiff.manifest``) a baseline keeps; None if unreadable.

    Why: a later check of a changed file says *what* changed (which weight, read by which node;
    "412 initializers float32->float16") without the old file. A model that ``onnx`` cannot
    parse still ran in ONNX Runtime, so its baseline is stored without a manifest, not refused.
    """
    try:
        return modeldiff.manifest(modeldiff.load_model(path))
    except MonitorError:
        return None


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise BaselineError(f"{path}: file not found")
    return tensors.load_npz(path, error=BaselineError, text=True)


def _default_intermediates(
    model: ModelConfig, providers: Sequence[ProviderSpec], session_cfg: SessionConfig
) -> IntermediateCapture:
    def grab(session: Session, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from monitor.localize import engine  # optional heavy machinery, only when asked

        return engine.capture_intermediates(model.path, feeds, providers=providers, session=session_cfg)

    return grab
