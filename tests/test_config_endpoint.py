"""``models[].endpoint``: every mistake is a ``ConfigError`` naming the file and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.config import settings
from monitor.errors import ConfigError


def write(tmp_path: Path, endpoint: Any) -> Path:
    (tmp_path / "m.onnx").write_bytes(b"")
    data = {
        "benchsets": [{"name": "b", "npz": ["b.npz"]}],
        "models": [{"name": "m", "path": "m.onnx", "benchset": "b", "endpoint": endpoint}],
    }
    path = tmp_path / "onnxmon.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("endpoint", "field", "words"),
    [
        ({"protocol": "v1", "url": "h:1", "model": "m"}, "models[0].endpoint.protocol", "v2-grpc"),
        ({"protocol": "v2-rest", "url": "http://user:pw@h:1", "model": "m"}, "models[0].endpoint.url", "credentials"),
        ({"protocol": "v2-grpc", "url": "http://h:1", "model": "m"}, "models[0].endpoint", "scheme"),
        ({"protocol": "v2-rest", "url": "h:1", "model": "a/b"}, "models[0].endpoint.model", "letters"),
        ({"protocol": "v2-rest", "url": "h:1", "model": "m", "timeout_s": "0s"}, "models[0].endpoint.timeout_s", ""),
        ({"protocol": "v2-rest", "url": "h:1", "model": "m", "tsl": True}, "models[0].endpoint.tsl", "unknown key"),
        ({"url": "h:1", "model": "m"}, "models[0].endpoint.protocol", "required"),
    ],
)
def test_a_bad_endpoint_names_the_file_and_the_field(tmp_path: Path, endpoint: Any, field: str, words: str) -> None:
    path = write(tmp_path, endpoint)
    with pytest.raises(ConfigError) as caught:
        settings.load(path, environ={})
    message = str(caught.value)
    assert str(path) in message
    assert field in message
    assert words.lower() in message.lower()


def test_a_good_endpoint_loads_with_its_token_file_relative_to_the_config(tmp_path: Path) -> None:
    endpoint = {"protocol": "v2-grpc", "url": "127.0.0.1:8001", "model": "m", "token_file": "secret/token"}
    loaded = settings.load(write(tmp_path, endpoint), environ={}).model("m").endpoint
    assert loaded is not None
    assert loaded.token_file == tmp_path / "secret" / "token"
    assert loaded.timeout_s == 30.0
