"""Ids past what the store can hold (SQLite and PostgreSQL keep 64-bit integers) are usage errors.

An id of 20 digits passed ``min=1`` and reached the database driver, which raised
``OverflowError``: a traceback and exit 1, the code reserved for drift. Each command taking a run or
incident id bounds it, so the mistake is one line and exit 2, before anything is opened.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.cli import main

TOO_BIG = str(2**63)  # one past the largest 64-bit signed integer


@pytest.mark.parametrize(
    "argv",
    [
        ["incident", "note", TOO_BIG, "--cause", "tf32", "--text", "x"],
        ["incident", "show", TOO_BIG],
        ["diagnose", "m", "--run", TOO_BIG],
    ],
    ids=["incident-note", "incident-show", "diagnose-run"],
)
def test_an_id_past_64_bits_is_a_usage_error_not_a_traceback(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "onnxmon.yaml"
    config.write_text(f"store: {{url: 'sqlite:///{tmp_path / 'h.db'}'}}\nmodels: []\n", encoding="utf-8")
    assert main(["db", "upgrade", "-c", str(config)]) == 0
    capsys.readouterr()
    code = main([*argv, "-c", str(config)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and "9223372036854775807" in err, err
