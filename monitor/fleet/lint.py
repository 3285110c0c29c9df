"""Comparability lint: the settings under which two healthy nodes need not compute the same bits.

Each finding names the setting and its fix. A group with a finding is voted on within a tolerance
(``vote.py``), never bit by bit, and the report says why. Read from the stack key's fields
(``runtime/stackkey.py``), the runs' reasons and, when the model file is at hand, its operator types.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One setting that makes cross-node digests meaningless, and what to set instead."""

    code: str
    detail: str
    fix: str


# Operators whose result depends on the order of a reduction split across threads (tree ensembles and
# reductions on CPU; scatters with a reduction on any provider).
ORDER_SENSITIVE_OPS = frozenset(
    {
        "TreeEnsembleClassifier",
        "TreeEnsembleRegressor",
        "TreeEnsemble",
        "ReduceSum",
        "ReduceMean",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSumExp",
        "ReduceSumSquare",
        "ReduceProd",
        "ScatterND",
        "ScatterElements",
        "Einsum",
    }
)


def _options(stack: Mapping[str, str], field: str) -> dict[str, object]:
    try:
        value = json.loads(stack.get(field) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def findings(
    stack: Mapping[str, str],
    reason_codes: Collection[str] = (),
    op_types: Collection[str] | None = None,
    model_stacks: Iterable[Mapping[str, str]] = (),
) -> tuple[Finding, ...]:
    """The comparability findings of one group: its stack key's fields, its runs' reasons, the model's op types
    (None: not known) and the stacks of every group of the model (mixed MIG profiles)."""
    found: list[Finding] = []
    providers = _options(stack, "session.provider_options")
    session = _options(stack, "session.options")
    used = stack.get("session.providers", "").split(",")
    cuda = providers.get("CUDAExecutionProvider")
    if "CUDAExecutionProvider" in used:
        search = str(cuda.get("cudnn_conv_algo_search", "EXHAUSTIVE")) if isinstance(cuda, dict) else "EXHAUSTIVE"
        if search.upper() == "EXHAUSTIVE":
            found.append(
                Finding(
                    "cudnn_conv_algo_search",
                    "cudnn_conv_algo_search: EXHAUSTIVE (the default) benchmarks convolution algorithms at run time",
                    "set the CUDA provider option cudnn_conv_algo_search: DEFAULT (or HEURISTIC)",
                )
            )
        if op_types is not None and "ConvTranspose" in op_types:
            found.append(
                Finding(
                    "conv_transpose",
                    "ConvTranspose present: cuDNN picks its backward-data algorithm per run",
                    "set cudnn_conv_algo_search: DEFAULT and deterministic_compute: true",
                )
            )
    if "TensorrtExecutionProvider" in used:
        trt = providers.get("TensorrtExecutionProvider")
        options = trt if isinstance(trt, dict) else {}
        shared = options.get("trt_engine_cache_enable") in (True, "1", "true", "True") or options.get(
            "trt_timing_cache_enable"
        ) in (True, "1", "true", "True")
        if not shared:
            found.append(
                Finding(
                    "tensorrt_engine",
                    "TensorRT without a shared engine or timing cache: each node builds its own engine",
                    "set trt_engine_cache_enable / trt_timing_cache_enable with a cache path shared by the nodes",
                )
            )
    gpu = any(p in used for p in ("CUDAExecutionProvider", "TensorrtExecutionProvider"))
    if gpu and not session.get("deterministic_compute"):
        found.append(
            Finding(
                "deterministic_compute",
                "deterministic compute off: GPU kernels may use atomics whose order varies",
                "set session.deterministic_compute: true",
            )
        )
    threads = session.get("intra_op_num_threads")
    sensitive = sorted(set(op_types or ()) & ORDER_SENSITIVE_OPS)
    if sensitive and (threads == 0 or (isinstance(threads, int) and threads > 1)):
        found.append(
            Finding(
                "intra_op_threads",
                f"intra-op threads {threads or 'auto'} with reduction-order-sensitive ops ({', '.join(sensitive)})",
                "set session.intra_op_num_threads: 1 for the monitored model",
            )
        )
    profiles = {s.get(k, "") for s in [stack, *model_stacks] for k in s if k.endswith(".mig_profile")}
    if len(profiles) > 1:
        found.append(
            Finding(
                "mixed_mig_profiles",
                f"mixed MIG profiles ({', '.join(sorted(profiles))}): slices of other sizes compute differently",
                "give each MIG profile a pool of its own (daemon.baseline_scope: pool)",
            )
        )
    if "concurrency_variant" in reason_codes:
        found.append(
            Finding(
                "concurrency_variant",
                "a run of the group computed differently under concurrent load (reason concurrency_variant)",
                "run the check alone on the device, or pin the settings its reason names",
            )
        )
    return tuple(found)
