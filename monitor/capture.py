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

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx

from monitor import bounded, modeldiff
from monitor.config.plan import CheckPlan
from monitor.config.settings import ModelConfig, ProviderSpec, SessionConfig
from monitor.errors import BaselineError, MonitorError
from monitor.files import baseline_meta, baseline_writer, baselines, benchsets, polygraphy, tensors
from monitor.runtime import envsnap
from monitor.runtime.session import Session
from monitor.serving import metadata

Progress = Callable[[int, int], None]
IntermediateCapture = Callable[[Session, Mapping[str, np.ndarray]], dict[str, np.ndarray]]

REFERENCE_PROVIDERS = (ProviderSpec(name="CPUExecutionProvider"),)
REFERENCE_SESSION = SessionConfig(graph_optimization_level="disable", intra_op_num_threads=1)


def capture_baseline(
    plan: CheckPlan,
    *,
    reference: bool = False,
    promote: bool = False,
    promoted_by: str = "",
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
    for layer-by-layer localization after an upgrade. ``promoted_by``: who asked for ``promote``
    (the CLI's login), recorded with the promotion as ``baseline promote`` records it.
    """
    model = plan.model
    bench = benchsets.ensure(plan.benchset, plan.benchsets_dir)
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
        snapshot = capture_env()
        if model.endpoint is not None:  # the server's metadata: an upgrade of it is then a named change
            snapshot = metadata.with_server(snapshot, metadata.server_fields(model.endpoint))
        meta = _meta(model, bench, session, "reference" if reference else "captured", snapshot, note)
        return _store(plan, meta, writer, promote, promoted_by, "capture --promote")


def stack_environment(plan: CheckPlan) -> envsnap.EnvSnapshot:
    """The environment a check of ``plan`` will record: its configured session, one sample run, then the snapshot.

    Why: a baseline made by another framework (``reference torch``) must record the ONNX Runtime
    stack that will be checked, not the libraries that framework mapped (a CUDA torch maps cuBLAS,
    cuDNN, cudart whatever ONNX Runtime uses). Run it in a fresh child that imports no framework;
    the sample loads the providers' lazy libraries as a check's first inference does.
    """
    model = plan.model
    session = Session(model.path, model.providers, model.session)
    bench = benchsets.ensure(plan.benchset, plan.benchsets_dir)
    if len(bench):
        session.run(bench.load_sample(0), where=f"benchset {bench.name!r} sample 0")
    return envsnap.capture()


def import_baseline(
    plan: CheckPlan,
    files: Sequence[Path],
    *,
    kind: Literal["npz", "onnx-test-data", "polygraphy-json"] = "npz",
    intermediates: Sequence[Path] = (),
    promote: bool = False,
    promoted_by: str = "",
    note: str = "",
) -> baselines.Baseline:
    """Store reference outputs produced elsewhere (e.g. PyTorch outputs saved as npz).

    ``npz``: one file per benchmark sample, in sample order, keys = model output names.
    ``onnx-test-data``: a directory of ``test_data_set_N/output_K.pb``.
    ``polygraphy-json``: one ``polygraphy run --save-outputs`` file, one iteration per sample; tensors
    that are not model outputs (``--onnx-outputs mark all``) are kept as intermediates.
    ``intermediates``: one npz per sample for the first samples (or one Polygraphy file), keys =
    the model's tensor names, stored for localization. Every output is checked against the model's
    signature: outputs of another batch size or another model are refused, naming file and output.
    """
    model = plan.model
    bench = benchsets.ensure(plan.benchset, plan.benchsets_dir)
    session = Session(model.path, model.providers, model.session)
    wanted = set(session.output_names)
    samples: Iterable[Mapping[str, np.ndarray]]
    extra: dict[int, dict[str, np.ndarray]] = {}
    if kind in ("onnx-test-data", "polygraphy-json"):
        if len(files) != 1:
            raise BaselineError(
                f"{kind} import takes exactly one {'directory' if kind == 'onnx-test-data' else 'file'}"
            )
        if kind == "onnx-test-data":
            samples = benchsets.read_onnx_test_outputs(files[0], output_names=session.output_names)
        else:
            read = polygraphy.read_run_results(files[0], error=BaselineError)[1]
            samples = [{k: v for k, v in s.items() if k in wanted} for s in read]
            extra = {i: rest for i, s in enumerate(read) if (rest := {k: v for k, v in s.items() if k not in wanted})}
        count = len(samples)
    else:
        samples, count = (_read_npz(path) for path in files), len(files)  # read one file at a time
    if count != len(bench):
        raise BaselineError(
            f"import for {model.name!r}: {count} output sample(s) given, benchset"
            f" {bench.name!r} v{bench.version} has {len(bench)} sample(s); give one per sample, in order"
        )
    if intermediates:
        extra = _read_intermediates(intermediates, len(bench))
    if extra:
        _known_tensors(model.path, extra)
    with baseline_writer.BaselineWriter(plan.baselines_dir, model.name) as writer:
        for index, sample in enumerate(samples):
            if set(sample) != wanted:
                raise BaselineError(
                    f"import for {model.name!r}: sample {index} has outputs {sorted(sample)}, model outputs are"
                    f" {sorted(wanted)}"
                )
            where = str(files[index]) if kind == "npz" else f"{files[0]} sample {index}"
            _fits_signature(sample, session, where)
            writer.add_sample({name: sample[name] for name in session.output_names})
            if index in extra:
                writer.add_intermediates(index, extra[index])
        meta = _meta(model, bench, session, "imported", envsnap.capture(), note)
        return _store(plan, meta, writer, promote, promoted_by, "import --promote")


def _read_intermediates(files: Sequence[Path], samples: int) -> dict[int, dict[str, np.ndarray]]:
    """Sample index -> tensors, from one npz per sample (the first ones) or one Polygraphy file."""
    if len(files) == 1 and files[0].suffix == ".json":
        read = polygraphy.read_run_results(files[0], error=BaselineError)[1]
    else:
        read = [_read_npz(path) for path in files]
    if len(read) > samples:
        raise BaselineError(f"--intermediates: {len(read)} sample(s) given, the benchmark set has {samples}")
    return dict(enumerate(read))


def _known_tensors(path: Path, extra: Mapping[int, Mapping[str, np.ndarray]]) -> None:
    """Refuse an intermediate whose name is no tensor of the model (a PyTorch module name, a typo)."""
    proto = onnx.load(str(path), load_external_data=False)
    known = {name for node in proto.graph.node for name in node.output} | {i.name for i in proto.graph.input}
    for index, named in extra.items():
        unknown = sorted(set(named) - known)
        if unknown:
            sample_names = sorted(known)[:5]
            raise BaselineError(
                f"--intermediates sample {index}: {unknown[:5]} are not tensors of {path.name}"
                f" ({len(unknown)} unknown); tensor names look like {sample_names}"
            )


def _fits_signature(sample: Mapping[str, np.ndarray], session: Session, where: str) -> None:
    """Refuse imported outputs whose rank or fixed dims differ from the model's (batch-8 for batch-1)."""
    for spec in session.info.outputs:
        if spec.name not in sample or not spec.shape:
            continue
        got = np.asarray(sample[spec.name]).shape
        fixed = len(got) == len(spec.shape) and all(
            not isinstance(want, int) or want < 0 or want == have for have, want in zip(got, spec.shape, strict=True)
        )
        if not fixed:
            wanted = tuple(d if isinstance(d, int) and d >= 0 else "?" for d in spec.shape)
            raise BaselineError(
                f"{where}: output {spec.name!r} has shape {got}, the model's output has shape {wanted}"
                " (is it from another batch size or another model?)"
            )


def _meta(
    model: ModelConfig,
    bench: benchsets.Benchset,
    session: Session,
    source: baseline_meta.Source,
    snapshot: envsnap.EnvSnapshot,
    note: str,
) -> baseline_meta.BaselineMeta:
    session_facts: dict[str, Any] = session.info.to_dict() | {"options": model.session.model_dump(mode="json")}
    return baseline_meta.new_meta(
        model.name, model.path, bench, source=source, session=session_facts, environment=snapshot.to_dict(), note=note
    )


def _store(
    plan: CheckPlan,
    meta: baseline_meta.BaselineMeta,
    writer: baseline_writer.BaselineWriter,
    promote: bool,
    promoted_by: str,
    asked: str,
) -> baselines.Baseline:
    """Commit the written samples as a baseline; the model's first baseline becomes active.

    The promotion says who and how: ``alice (capture --promote)``, ``alice (first baseline)``."""
    root = plan.baselines_dir
    first = baselines.active_id(root, plan.name) is None
    described = model_manifest(plan.model.path)
    if described is not None:
        writer.add_document(baselines.MODEL_MANIFEST, described)
    baseline = writer.commit(meta)
    if promote or first:
        how = asked if promote else "first baseline"
        baselines.promote(root, baseline.id, by=f"{promoted_by} ({how})" if promoted_by else how)
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
    if problem := bounded.not_regular(path):
        raise BaselineError(f"npz file {path} {problem}")
    return tensors.load_npz(path, error=BaselineError, text=True)


def _default_intermediates(
    model: ModelConfig, providers: Sequence[ProviderSpec], session_cfg: SessionConfig
) -> IntermediateCapture:
    def grab(session: Session, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from monitor.localize import engine  # optional heavy machinery, only when asked

        return engine.capture_intermediates(model.path, feeds, providers=providers, session=session_cfg)

    return grab
