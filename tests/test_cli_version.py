"""`cdcnorm --version`: the installed package's version, the number of input formats and whether
the transforms run compiled (transforms.compiled)."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

from cdcnorm.cli import app
from transforms.compiled import status
from transforms.decoders import DECODERS


def test_version_names_the_installed_package_and_the_formats() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    formats = len(DECODERS) - 1  # auto is not a format of its own
    expected = f"cdcnorm {version('cdcnorm')} ({formats} input formats + auto; transforms {status()})"
    assert result.stdout.strip() == expected
    assert ("transforms compiled (" in expected) == status().compiled
