"""``models[].decisions``: what each output decides, and whether the model's outputs can decide it.

The schema (``Decision``) says what a decision is; ``problems`` says whether it fits the model: an
output the model does not have, or one whose type or shape cannot be decided that way (``argmax``
of strings, ``equal`` on float scores, an axis beyond the output's rank), each a config error that
names the field, the output and its type. The output types come from the model's signature, read
by the caller (``files.signature.output_types``: the config layer sits below ``files/``), in the
companion-tensor scheme of ``runtime/nontensor.py``: a ZipMap ``probabilities`` is a float table
``(maps, keys)`` and ``probabilities:keys`` its int64 or string keys.

Self-contained on purpose: ``references`` gives the (field path, output name) pairs the generic
unknown-output check (``crosscheck.output_references``) takes, and ``problems`` the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidatorFunctionWrapHandler, field_validator, model_validator

from monitor.config.fields import StrictModel


class Decision(StrictModel):
    """What one output decides; its flips against the baseline are counted by every check."""

    kind: Literal["argmax", "threshold", "equal"] = Field(
        description="argmax: a class per row (along `axis`); threshold: yes/no per element (x > value);"
        " equal: integer, bool or string labels compared as they are."
    )
    axis: int = Field(default=-1, description="argmax only: the axis of the classes.")
    value: float | None = Field(
        default=None,
        allow_inf_nan=False,
        description="threshold only (required): an element decides yes when x > value (compared exactly: an"
        " integer output with an integer value, a float output in float64).",
    )

    @field_validator("value", mode="wrap")
    @classmethod
    def _integers_exactly(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """An integer ``value`` is kept as written: ``2**53 + 1`` is no float64, and int64 outputs compare exactly."""
        if isinstance(value, int) and not isinstance(value, bool):
            if not -(2**64) <= value <= 2**64:
                raise ValueError("an integer threshold must lie within [-2**64, 2**64]")
            return value
        return handler(value)

    @model_validator(mode="after")
    def _fields_of_kind(self) -> Decision:
        if self.kind == "threshold" and self.value is None:
            raise ValueError("a threshold decision needs `value` (yes when x > value)")
        if self.kind != "threshold" and self.value is not None:
            raise ValueError(f"`value` is for threshold decisions, not {self.kind}")
        if self.kind != "argmax" and "axis" in self.model_fields_set:
            raise ValueError(f"`axis` is for argmax decisions, not {self.kind}")
        return self


@dataclass(frozen=True)
class OutputType:
    """One output tensor as a check will see it: its element type (ONNX name) and rank (None: unknown)."""

    element: str  # "float", "float16", "int64", "string", "bool", ...
    rank: int | None
    text: str  # for messages: "tensor(float) [batch, 10]", "seq(map(int64,tensor(float)))"


TypesOf = Callable[[Path], Mapping[str, OutputType]]  # output (companion) name -> type; MonitorError when unreadable

_NUMERIC = {"float16", "bfloat16", "float", "double"} | {f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64)}
_LABELS = {f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64)} | {"bool", "string"}


def references(decisions: Mapping[str, Decision], where: str) -> list[tuple[str, str]]:
    """(field path, output name) for each decision: the pairs the unknown-output cross-check takes."""
    return [(f"{where}.decisions.{name}", name) for name in decisions]


def misfit(decision: Decision, output: OutputType) -> str | None:
    """Why ``output`` cannot be decided as ``decision`` says; None when it can (or cannot be known)."""
    if decision.kind in ("argmax", "threshold") and output.element not in _NUMERIC:
        return f"{decision.kind} needs numeric scores"
    if decision.kind == "equal" and output.element not in _LABELS:
        return "equal compares integer, bool or string labels as they are (float scores: use argmax or threshold)"
    if decision.kind == "argmax" and output.rank is not None and not -output.rank <= decision.axis < output.rank:
        return f"argmax axis {decision.axis} is out of range for a rank-{output.rank} output"
    if decision.kind == "argmax" and output.rank == 0:
        return "argmax needs at least one axis"
    return None


def problems(
    decisions: Mapping[str, Decision], where: str, types: Mapping[str, OutputType], model_file: str
) -> list[str]:
    """One config error per decision naming an output ``types`` lacks, or one it cannot decide."""
    found = []
    for name, decision in decisions.items():
        path = f"{where}.decisions.{name}"
        output = types.get(name)
        if output is None:
            found.append(f"{path}: {name!r} is not an output of {model_file}; outputs are {sorted(types)}")
            continue
        why = misfit(decision, output)
        if why is not None:
            found.append(f"{path}: {decision.kind} cannot decide output {name!r} of {model_file}, {output.text}: {why}")
    return found


def numeric_warn_problem(default: Any, outputs: Mapping[str, Any], decisions: Mapping[str, Decision]) -> str | None:
    """The problem of ``tolerance.numeric: warn`` (model default or an output) on a model that decides nothing."""
    tolerances = {"default": default, **{f"outputs.{name}": t for name, t in outputs.items()}}
    warn = [f"tolerance.{where}.numeric" for where, t in tolerances.items() if t.numeric == "warn"]
    if not warn or decisions:
        return None
    return (
        f"{', '.join(warn)}: numeric: warn makes a drift that flips no decision a warning, but the model"
        " has no `decisions:`, so no drift would ever fail; declare what its outputs decide"
    )


# The schema's fields that belong to decisions, declared here so ``schema.py`` only names them.
FLIP_RATIO_FIELD: Any = Field(
    default=None,
    ge=0.0,
    le=1.0,
    description="Fraction of an output's decisions (models[].decisions) allowed to differ from the baseline's"
    " (default 0); more is reason decision_changed.",
)
NUMERIC_FIELD: Any = Field(
    default=None,
    description="fail (default): numeric drift fails. warn: on a model with decisions, a numeric drift that"
    " flips no decision is a warning (verdict pass, outputs[].warnings) and a decision change fails.",
)
DECISIONS_FIELD: Any = Field(
    default={},
    description="What outputs decide, by output name ({kind: argmax, axis: -1}, {kind: threshold, value: 0.5},"
    " {kind: equal}); each check counts the decisions that differ from the baseline's.",
)
