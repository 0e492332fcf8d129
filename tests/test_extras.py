"""A command whose extra is not installed names the pip install to run (transforms/extras.py)."""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Callable
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from transforms.errors import CdcnormError, MissingExtraError
from transforms.extras import EXTRAS, missing_modules, require_extras

ROOT = Path(__file__).resolve().parents[1]
ABSENT = "cdcnorm_test_module_that_is_not_installed"


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Make an extra look uninstalled: ``without("sink")``."""

    def hide(*extras: str) -> None:
        for extra in extras:
            monkeypatch.setitem(EXTRAS, extra, (*EXTRAS[extra], ABSENT))

    return hide


def test_extras_name_the_modules_of_pyproject_extras() -> None:
    """EXTRAS lists, per extra, the import name of each requirement pyproject.toml gives it."""
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert set(EXTRAS) == set(optional) - {"dev"}
    distributions = packages_distributions()

    def normalize(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    for extra, modules in EXTRAS.items():
        required = {normalize(re.split(r"[=<>!~;\[ ]", r, maxsplit=1)[0]) for r in optional[extra]}
        provided = {normalize(d) for module in modules for d in distributions.get(module, [])}
        assert provided == required, f"EXTRAS[{extra!r}] imports {sorted(provided)}, pyproject.toml's {extra} is {sorted(required)}"


def test_installed_extras_pass() -> None:
    for extra in EXTRAS:
        assert missing_modules(extra) == []
    require_extras("everything", *EXTRAS)
    require_extras("the base install")


def test_missing_extra_names_the_pip_install(without: Callable[..., None]) -> None:
    without("sink")
    with pytest.raises(MissingExtraError) as info:
        require_extras("the Iceberg sink", "service", "sink")
    error = info.value
    assert isinstance(error, ImportError) and isinstance(error, CdcnormError)
    assert error.extras == ["sink"] and error.modules == [ABSENT]
    assert error.install == "pip install 'cdcnorm[sink]'"
    assert str(error) == f"the Iceberg sink needs {ABSENT}, which is not installed: pip install 'cdcnorm[sink]'"


@pytest.mark.parametrize(
    ("argv", "hidden", "install"),
    [
        (["worker", "--config", "pipeline.yaml"], ["service"], "pip install 'cdcnorm[service]'"),
        (["tail", "some.topic"], ["service"], "pip install 'cdcnorm[service]'"),
        (["sink", "--config", "pipeline.yaml"], ["sink"], "pip install 'cdcnorm[sink]'"),
        (["tables", "--config", "pipeline.yaml"], ["sink"], "pip install 'cdcnorm[sink]'"),
        (["up"], ["sink", "local"], "pip install 'cdcnorm[sink,local]'"),
        (["up", "--no-sink"], ["sink", "local"], "pip install 'cdcnorm[local]'"),
    ],
    ids=["worker", "tail", "sink", "tables", "up", "up-no-sink"],
)
def test_cli_command_without_its_extra(
    argv: list[str], hidden: list[str], install: str, without: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    from cdcnorm.cli import main

    without(*hidden)
    monkeypatch.setattr(sys, "argv", ["cdcnorm", *argv])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.rstrip().endswith(install), err
    assert "Traceback" not in err


def test_python_m_sink_without_the_sink_extra(
    without: Callable[..., None], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sink.__main__ import main

    without("sink")
    monkeypatch.setattr(sys, "argv", ["python -m sink", "--config", "pipeline.yaml"])
    assert main() == 1
    assert capsys.readouterr().err.rstrip().endswith("pip install 'cdcnorm[sink]'")


def test_local_broker_without_the_local_extra(without: Callable[..., None]) -> None:
    from service.local import start_tansu

    without("local")
    with pytest.raises(MissingExtraError, match=re.escape("pip install 'cdcnorm[local]'")):
        start_tansu()


def test_iceberg_jar_without_the_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    from sink.spark_session import iceberg_jar

    monkeypatch.setitem(sys.modules, "snowpark_connect_deps_iceberg", None)  # import fails: ModuleNotFoundError
    with pytest.raises(MissingExtraError, match=re.escape("pip install 'cdcnorm[sink]'")):
        iceberg_jar()
