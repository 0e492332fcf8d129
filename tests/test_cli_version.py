"""`cdcnorm --version`: the installed package's version and the number of input formats."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

from cdcnorm.cli import app
from transforms.decoders import DECODERS


def test_version_names_the_installed_package_and_the_formats() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    formats = len(DECODERS) - 1  # auto is not a format of its own
    assert result.stdout.strip() == f"cdcnorm {version('cdcnorm')} ({formats} input formats + auto)"
