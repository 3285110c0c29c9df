"""A bug in onnxmon exits 70, never 1: 1 tells every script and CI job that the numbers drifted."""

from __future__ import annotations

import pytest
import typer

from monitor import cli


def test_an_unexpected_exception_exits_70_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = typer.Typer()

    @broken.command("explode")
    def explode() -> None:  # stands in for a bug: no real command is known to raise like this
        raise KeyError("no such thing")

    @broken.command("fine")
    def fine() -> None:  # a second command: a group, as onnxmon's app is
        """Nothing."""

    monkeypatch.setattr(cli, "app", broken)
    monkeypatch.setattr(cli, "_register", lambda: None)
    code = cli.main(["explode"])
    err = capsys.readouterr().err
    assert code == cli.INTERNAL_ERROR == 70
    assert "Traceback" in err and "KeyError: 'no such thing'" in err
    assert err.rstrip().splitlines()[-1] == "onnxmon: internal error (KeyError): a bug in onnxmon, please report it"


def test_usage_errors_and_a_missing_file_keep_their_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["no-such-command"]) == 2
    assert cli.main(["check", "--config", "/nonexistent/onnxmon.yaml"]) in (2, 3)
    assert "internal error" not in capsys.readouterr().err
