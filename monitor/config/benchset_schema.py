"""The ``benchsets:`` section: a declared benchmark set and its one source (generated, npz files or
globs, ONNX test data, Polygraphy inputs, or a set made by ``onnxmon benchset import``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator, model_validator

from monitor.config.fields import NAME_PATTERN, StrictModel


class GenerateSpec(StrictModel):
    """Random samples drawn from a model's input signature (seeded, so reproducible)."""

    model: Path = Field(description="Model whose input signature the samples follow.")
    count: int = Field(default=8, ge=1, le=100_000, description="Number of random samples.")
    seed: int = Field(default=0, ge=0, lt=2**63, description="Seed of the random generator (same seed, same set).")
    ranges: dict[str, tuple[float, float]] = Field(default={}, description="Per-input [low, high] value range.")
    dims: dict[str, int] = Field(
        default={}, description="Values of dynamic dims, by dim name or 'input:axis' for unnamed ones."
    )
    edge_cases: bool = Field(
        default=False, description="Add zeros, range extremes, fp16-overflowing and denormal samples."
    )

    @field_validator("dims")
    @classmethod
    def _positive_dims(cls, dims: dict[str, int]) -> dict[str, int]:
        for name, value in dims.items():
            if not 1 <= value <= 2**31 - 1:
                raise ValueError(f"dim {name!r} must be between 1 and 2**31-1, got {value}")
        return dims

    @field_validator("ranges")
    @classmethod
    def _ordered(cls, ranges: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        for name, (low, high) in ranges.items():
            if not (math.isfinite(low) and math.isfinite(high)):
                raise ValueError(f"range for input {name!r} must be finite, got [{low}, {high}]")
            if low > high:
                raise ValueError(f"range for input {name!r} has low {low} > high {high}")
        return ranges


BENCHSET_SOURCES = ("generate", "npz", "onnx_test_data", "polygraphy_json", "imported")


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str | Path) else value


class BenchsetConfig(StrictModel):
    """A declared benchmark set; exactly one source."""

    name: str = Field(pattern=NAME_PATTERN, description="Name of the set.")
    generate: GenerateSpec | None = Field(default=None, description="Generate samples from the model signature.")
    npz: Annotated[list[Path] | None, BeforeValidator(_one_or_many)] = Field(
        default=None, description="One .npz per sample (globs like data/*.npz, sorted by name); keys are input names."
    )
    onnx_test_data: Path | None = Field(
        default=None, description="ONNX test-data directory (test_data_set_N/input_K.pb)."
    )
    polygraphy_json: Path | None = Field(default=None, description="Inputs saved by polygraphy --save-inputs.")
    imported: bool = Field(
        default=False,
        description="Made by `onnxmon benchset import NAME FILES...`: its newest version is used as it is."
        " A model may also name such a set without declaring it.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> BenchsetConfig:
        sources = [s for s in BENCHSET_SOURCES if getattr(self, s)]
        if len(sources) != 1:
            raise ValueError(
                f"set exactly one source of {', '.join(map(repr, BENCHSET_SOURCES))} (found {sources or 'none'})"
            )
        return self

    @property
    def source(self) -> str:
        for s in BENCHSET_SOURCES:
            if getattr(self, s):
                return s
        raise AssertionError("validated to have one source")
