"""Hypotheses from the evidence onnxmon already has, before anything is re-run.

A failing run carries its reasons, the environment diff against the baseline's snapshot, the static
model diff (when the file is not the baseline's), the benchmark-set checksum, input casts, the
providers really used, the lint hazards of the model file (``details.lint``), and perhaps a
localization; the snapshot holds NVML clocks, temperature and clock-event (throttle) reasons. Each
becomes a ``Hypothesis`` with the facts that support it. These *correlate* with the drift; only an
experiment whose revert restores the baseline proves a cause, so their weights (which only order
them: ``rank``) stay below a successful revert's, and their ``basis`` is ``evidence``. Two are
measurements of the check itself (``basis: measured``) and rank with measured nondeterminism: the
``input_mismatch`` a reference's input check found, and the ``nondeterministic`` spread of the
check's own repeats. No fix here names a setting that is already in effect (``session``).
``facts()`` turns the same run into the ``knowledge.rules.Facts`` the rules match on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from monitor.config.settings import SessionConfig
from monitor.diagnose import fixes
from monitor.diagnose.modelchange import model_change_kinds, model_hypotheses, verify_hypotheses
from monitor.diagnose.result import EVIDENCE, MEASURED, Hypothesis
from monitor.knowledge.incidents import localized_op_types
from monitor.knowledge.rules import Facts
from monitor.results import CheckResult

# Environment field prefixes -> (cause, weight, fix); the first that matches wins.
_ENV_CAUSES: tuple[tuple[str, str, float, str], ...] = (
    (
        "onnxruntime.version",
        "runtime_version",
        0.7,
        "pin the baseline's onnxruntime release, or re-capture the baseline",
    ),
    ("onnxruntime.", "runtime_version", 0.5, "use the baseline's onnxruntime package and build"),
    ("cuda.", "gpu_library_version", 0.6, "use the baseline's CUDA / cuDNN / cuBLAS / TensorRT libraries"),
    ("env.NVIDIA_TF32_OVERRIDE", "tf32", 0.6, "set NVIDIA_TF32_OVERRIDE as the baseline had it"),
    ("env.OMP_NUM_THREADS", "thread_count", 0.5, "set OMP_NUM_THREADS as the baseline had it"),
    ("gpu.", "driver_or_gpu_changed", 0.6, "keep baselines per GPU kind (daemon.baseline_scope: pool)"),
    ("nvml.driver", "driver_or_gpu_changed", 0.6, "use the baseline's driver, or re-capture after the upgrade"),
    ("cpu.flags", "cpu_isa", 0.6, "keep baselines per CPU kind (daemon.baseline_scope: pool)"),
    ("cpu.model", "cpu_isa", 0.5, "keep baselines per CPU kind (daemon.baseline_scope: pool)"),
    ("cpu.usable_cores", "thread_count", 0.45, "set session.intra_op_num_threads explicitly instead of 0 (auto)"),
    ("cpu.quota_cores", "thread_count", 0.45, "set session.intra_op_num_threads explicitly instead of 0 (auto)"),
    ("cpu.logical_cores", "thread_count", 0.4, "set session.intra_op_num_threads explicitly instead of 0 (auto)"),
)


def from_run(
    run: CheckResult,
    *,
    repeats_differ: bool = False,
    model_kinds: Iterable[str] = (),
    session: SessionConfig | None = None,
) -> list[Hypothesis]:
    """Hypotheses supported by the run's own record.

    ``repeats_differ``: a replay measured two identical runs disagreeing beyond tolerance.
    ``model_kinds``: what the model file itself is (``quantized``, ``precision``: QDQ or integer ops,
    float16/bfloat16 tensors), for the verify flow below. ``session``: production's session options
    (a fix already in effect is not offered).
    """
    details = run.details
    codes = _reason_codes(run)
    found = model_hypotheses(codes, details.get("model_diff"))
    found += verify_hypotheses(run, codes, set(model_kinds))
    if "benchset_changed" in codes:
        found.append(
            Hypothesis(
                "benchset_changed",
                0.8,
                (_detail(run, "benchset_changed"),),
                "re-capture the baseline on this benchmark-set version",
                "evidence",
            )
        )
    found += _input_hypotheses(run, codes)
    found += lint_hypotheses(run, codes, repeats_differ=repeats_differ or "nondeterministic" in codes)
    if "nondeterministic" in codes:
        found.append(
            Hypothesis(
                "nondeterminism",
                0.85,
                tuple(_details(run, "nondeterministic"))[:2] or ("nondeterministic",),
                fixes.nondeterminism_fix(session, run.providers_effective),
                "evidence",
                MEASURED,
            )
        )
    if details.get("input_casts"):
        casts = ", ".join(f"{k}: {v}" for k, v in dict(details["input_casts"]).items())
        found.append(
            Hypothesis(
                "input_mismatch",
                0.3,
                (f"inputs cast to fit the model: {casts}",),
                "feed the model its own input dtypes",
                "evidence",
            )
        )
    if "provider_fallback" in codes:
        found.append(
            Hypothesis(
                "execution_provider_fallback",
                0.8,
                (_detail(run, "provider_fallback"),),
                "make the requested provider load (its libraries, the device) or accept CPU with a CPU baseline",
                "evidence",
            )
        )
    found += _env_hypotheses(details.get("env_diff") or [], gpu=_ran_on_gpu(run), session=session)
    found += _throttling(run)
    return found


def _input_hypotheses(run: CheckResult, codes: set[str]) -> list[Hypothesis]:
    """``input_mismatch``: the reference's own input check measured that its framework was fed otherwise.

    A measurement, not a correlation (the layout, channel order or scale is named), so it ranks
    with measured nondeterminism, above the rest of the evidence: no knob of the runtime fixes it.
    """
    if "input_mismatch" not in codes:
        return []
    described = tuple(_details(run, "input_mismatch"))[:4]
    fix = "feed the model the inputs its reference consumed (the same channel order, layout and scaling)"
    return [Hypothesis("input_mismatch", 0.85, described or ("input_mismatch",), fix, "evidence", MEASURED)]


# lint hazard code -> (cause, weight when it explains the failure, fix)
_HAZARD_CAUSES: dict[str, tuple[str, float, str]] = {
    "batchnorm_training": (
        "export_training_mode",
        0.8,
        "export the model in eval mode (model.eval() before torch.onnx.export)",
    ),
    "dropout_training": (
        "export_training_mode",
        0.8,
        "export the model in eval mode (model.eval() before torch.onnx.export)",
    ),
    "resize_mode": (
        "export_resize_mode",
        0.55,
        "export Resize with the framework's coordinate mode (align_corners / half_pixel as the model used)",
    ),
    "baked_batch": ("export_baked_shape", 0.7, "export with a dynamic batch dim (dynamic_axes / dynamic_shapes)"),
    "baked_dim": (
        "export_baked_shape",
        0.7,
        "export with the dynamic dim (e.g. seq) left dynamic: x.shape[i], not a constant",
    ),
    "fixed_dim": ("export_baked_shape", 0.7, "export with the dims the benchmark set varies left dynamic"),
    "fp16_overflow": ("model_precision_changed", 0.6, "keep the weights past 65504 in float32 when converting"),
}


def lint_hypotheses(run: CheckResult, codes: set[str], *, repeats_differ: bool = False) -> list[Hypothesis]:
    """The lint hazards the check stored (``details.lint``) as causes.

    A hazard explains a difference from the *framework*: against a ``reference`` baseline (PyTorch's
    own outputs) or a changed model file it is the likely cause. Against an ONNX Runtime baseline of
    the same file both sides ran the same graph, so a hazard explains little (a fifth of the weight),
    except Dropout left in training mode, whose random masks differ on every run. A
    ``batch_variant`` reason is what a training-mode BatchNorm or a baked batch does: it adds weight.
    Repeats that differ are what training mode does (running statistics updated in place, random
    masks): with a training-mode hazard the export is the cause and the spread its symptom (0.9).
    """
    details = run.details
    lint = details.get("lint")
    hazards = lint.get("hazards") if isinstance(lint, Mapping) else None
    if not isinstance(hazards, list):
        return []
    against_framework = details.get("baseline_source") == "reference" or "model_changed" in codes
    found = []
    for hazard in hazards:
        if not isinstance(hazard, Mapping) or str(hazard.get("code")) not in _HAZARD_CAUSES:
            continue
        code = str(hazard["code"])
        cause, weight, fix = _HAZARD_CAUSES[code]
        basis = EVIDENCE
        if hazard.get("severity") != "error":
            weight *= 0.6
        if not against_framework and code != "dropout_training":
            weight *= 0.2
        if "batch_variant" in codes and code in ("batchnorm_training", "baked_batch"):
            weight = min(0.8, weight + 0.1)
        where = f"{hazard.get('node')} ({hazard.get('op_type')})"
        evidence = [f"lint {hazard.get('severity')} {code} at {where}: {hazard.get('detail', '')}"[:300]]
        if repeats_differ and cause == "export_training_mode" and hazard.get("severity") == "error":
            weight, basis = 0.9, MEASURED
            evidence.append("two identical runs disagree: what training mode does (statistics updated, random masks)")
        found.append(Hypothesis(cause, round(weight, 3), tuple(evidence), fix, "evidence", basis))
    return found


_GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider", "NvTensorRTRTXExecutionProvider")


def _ran_on_gpu(run: CheckResult) -> bool:
    """Whether ONNX Runtime used a CUDA-library provider; a run that does not say is given the benefit."""
    effective = run.providers_effective
    if not effective:
        return True
    return any(str(p) in _GPU_PROVIDERS for p in effective)


def _env_hypotheses(
    env_diff: Iterable[Mapping[str, object]], *, gpu: bool = True, session: SessionConfig | None = None
) -> list[Hypothesis]:
    """Stable environment changes as causes; CUDA libraries only when a CUDA-library provider ran.

    Why: a CPU-only session never calls cuBLAS or cuDNN, so their versions cannot move its numbers (a
    reference made in a CUDA torch's process recorded them; a check of the CPU stack lacks them). A
    core count moves ONNX Runtime's thread count only when ``intra_op_num_threads`` is 0 (auto): with
    an explicit count it is not a cause, and its fix ("set it explicitly") would already be in effect.
    """
    explicit = session is not None and session.intra_op_num_threads > 0
    found = []
    for change in env_diff:
        if not change.get("stable"):
            continue
        name = str(change.get("field"))
        if name.startswith("cuda.") and not gpu:
            continue
        for prefix, cause, weight, fix in _ENV_CAUSES:
            if name.startswith(prefix):
                if explicit and prefix.startswith("cpu.") and cause == "thread_count":
                    break
                evidence = f"{name}: {change.get('old')!r} → {change.get('new')!r}"
                found.append(Hypothesis(cause, weight, (evidence,), fix, "evidence"))
                break
    return found


def _throttling(run: CheckResult) -> list[Hypothesis]:
    """GPU clocks held back by heat or power in the run's own snapshot (NVML clock-event reasons)."""
    environment = run.environment
    fields = environment.get("fields") if isinstance(environment.get("fields"), Mapping) else environment
    found = []
    for name, value in dict(fields or {}).items():
        if not str(name).endswith("clock_event_reasons"):
            continue
        raw = value.get("value") if isinstance(value, Mapping) else value
        reasons = [str(r) for r in raw] if isinstance(raw, list) else []
        hot = [r for r in reasons if "thermal" in r or "power" in r]
        if hot:
            gpu = str(name).removesuffix(".clock_event_reasons")
            temperature = fields.get(f"{gpu}.temperature_c") if fields else None
            temp = temperature.get("value") if isinstance(temperature, Mapping) else temperature
            evidence = f"{name}: {', '.join(hot)}" + (f" at {temp} °C" if temp is not None else "")
            found.append(
                Hypothesis("gpu_throttling", 0.35, (evidence,), "check the node's cooling and power limits", "evidence")
            )
    return found


def facts(
    run: CheckResult,
    *,
    model_op_types: Iterable[str] = (),
    session: SessionConfig | None = None,
    knobs_fixed: Iterable[str] = (),
    nondeterministic: bool = False,
    worst_ratio: float | None = None,
) -> Facts:
    """The run in the terms ``knowledge.rules`` matches on."""
    details = run.details
    environment = run.environment
    raw_fields = environment.get("fields")
    fields: Mapping[str, object] = raw_fields if isinstance(raw_fields, Mapping) else {}
    env = {k: (v.get("value") if isinstance(v, Mapping) else v) for k, v in fields.items()}
    effective = [str(p) for p in run.providers_effective]
    provider_options: dict[str, str] = {}
    for name, options in dict((details.get("session") or {}).get("provider_options") or {}).items():
        if name in effective and isinstance(options, Mapping):
            provider_options.update({str(k): str(v) for k, v in options.items()})
    metrics: set[str] = set()
    codes = _reason_codes(run)
    metrics |= {c for c in ("nan_mismatch", "inf_mismatch") if c in codes}
    if nondeterministic or "nondeterministic" in codes:
        metrics.add("nondeterministic")
    if worst_ratio is not None:
        metrics.add("small_drift" if worst_ratio < 100 else "large_drift")
    return Facts(
        env_changed=frozenset(str(c.get("field")) for c in details.get("env_diff") or [] if c.get("stable")),
        env=env,
        op_types=frozenset(localized_op_types(details.get("localization"))),
        model_op_types=frozenset(model_op_types),
        reasons=frozenset(codes),
        providers=frozenset(effective),
        provider_options=provider_options,
        session=session.model_dump(mode="json") if session is not None else {},
        metrics=frozenset(metrics),
        knobs_fixed=frozenset(knobs_fixed),
        model_change=frozenset(model_change_kinds(details.get("model_diff"))),
    )


def _reason_codes(run: CheckResult) -> set[str]:
    return {r.code for r in run.all_reasons()}


def _details(run: CheckResult, code: str) -> list[str]:
    """Every detail of the run's reasons with ``code`` (top-level and per output), deduplicated."""
    found: list[str] = []
    for reason in run.all_reasons():
        if reason.code == code:
            text = f"{code}: {reason.detail}"[:300]
            if text not in found:
                found.append(text)
    return found


def _detail(run: CheckResult, code: str) -> str:
    for reason in run.reasons:
        if reason.code == code:
            return f"{code}: {reason.detail}"[:300]
    return code
