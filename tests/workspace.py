"""A throwaway onnxmon workspace on disk: models, a config file, benchsets and baselines.

Tests describe the models they need; ``Workspace`` writes a real ``onnxmon.yaml`` next to
them and loads it through ``monitor.config.settings.load`` exactly as the CLI would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import yaml

from monitor.config import settings
from monitor.config.settings import Settings


@dataclass
class Workspace:
    root: Path
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    benchsets: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def config_file(self) -> Path:
        return self.root / "onnxmon.yaml"

    def add_model(
        self,
        name: str,
        model: onnx.ModelProto,
        *,
        count: int = 4,
        dims: Mapping[str, int] | None = None,
        seed: int = 0,
        **model_fields: Any,
    ) -> Path:
        """Save ``model`` as ``models/<name>.onnx`` with a generated benchset ``<name>-bench``."""
        path = self.root / "models" / f"{name}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(path))
        self.benchsets[name] = {
            "name": f"{name}-bench",
            "generate": {
                "model": f"models/{name}.onnx",
                "count": count,
                "seed": seed,
                "dims": dict(dims or {"batch": 2}),
            },
        }
        self.models[name] = {"name": name, "path": f"models/{name}.onnx", "benchset": f"{name}-bench", **model_fields}
        return path

    def replace_model(self, name: str, model: onnx.ModelProto) -> Path:
        """Overwrite the model file in place (the benchset and baseline stay)."""
        path = self.root / "models" / f"{name}.onnx"
        onnx.save(model, str(path))
        return path

    def set(self, name: str, **model_fields: Any) -> None:
        self.models[name].update(model_fields)

    def write(self) -> Path:
        data: dict[str, Any] = {
            "store": {"url": "sqlite:///onnxmon.db", "baselines_dir": "baselines", "benchsets_dir": "benchsets"},
            "benchsets": list(self.benchsets.values()),
            "models": list(self.models.values()),
        }
        data.update(self.extra)
        self.config_file.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return self.config_file

    def settings(self) -> Settings:
        return settings.load(self.write(), environ={})
