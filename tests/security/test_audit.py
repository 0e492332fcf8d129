"""scripts/audit: findings fail unless waived, waivers are checked, and an unreachable
vulnerability service is reported as such (pip-audit replaced by a fake that plays back reports)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "audit"

FAKE = """
import json, pathlib, sys
args = sys.argv[1:]
service, out = args[args.index("-s") + 1], args[args.index("-o") + 1]
play = pathlib.Path(sys.argv[0]).parent / service
if (play.with_suffix(".json")).exists():
    pathlib.Path(out).write_text(play.with_suffix(".json").read_text())
    sys.exit(1 if '"vulns": [{' in play.with_suffix(".json").read_text() else 0)
print("Traceback (most recent call last):", file=sys.stderr)
print(play.with_suffix(".err").read_text() if play.with_suffix(".err").exists() else "boom", file=sys.stderr)
sys.exit(1)
"""

OSV_DOWN = (
    "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='api.osv.dev', port=443): "
    "Max retries exceeded (Caused by NameResolutionError(...))"
)


def report(*deps: dict[str, Any]) -> str:
    return json.dumps({"dependencies": list(deps), "fixes": []})


VULNERABLE = report(
    {"name": "somepkg", "version": "1.0", "vulns": [
        {"id": "GHSA-aaaa-bbbb-cccc", "fix_versions": ["1.2.1"], "aliases": ["CVE-2026-0001"]}]},
    {"name": "otherpkg", "version": "2.0", "vulns": []},
)
ALL_SKIPPED = report(
    {"name": "somepkg", "skip_reason": "Dependency not found on PyPI and could not be audited: somepkg (1.0)"},
)


def audit(tmp_path: Path, plays: dict[str, str], waivers: str = "", env: dict[str, str] | None = None) -> tuple[int, str]:
    fake_dir = tmp_path / "fake"
    fake_dir.mkdir(exist_ok=True)
    (fake_dir / "pip_audit_fake.py").write_text(FAKE)
    for name, content in plays.items():
        (fake_dir / name).write_text(content)
    (tmp_path / "waivers.toml").write_text(waivers)
    run_env = {k: v for k, v in os.environ.items() if k != "CDCNORM_AUDIT_REQUIRE"}
    run_env.update({"CDCNORM_PIP_AUDIT": f"{sys.executable} {fake_dir / 'pip_audit_fake.py'}", **(env or {})})
    proc = subprocess.run(
        [str(SCRIPT), "--waivers", str(tmp_path / "waivers.toml")],
        capture_output=True, text=True, env=run_env, timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr


def waiver(until: dt.date, id_: str = "CVE-2026-0001", package: str = "SomePkg", reason: str = "not reachable") -> str:
    return f'[[waiver]]\nid = "{id_}"\npackage = "{package}"\nreason = "{reason}"\nuntil = {until.isoformat()}\n'


TOMORROW = dt.date.today() + dt.timedelta(days=1)
YESTERDAY = dt.date.today() - dt.timedelta(days=1)


def test_an_unwaived_finding_fails_with_its_fix(tmp_path: Path) -> None:
    code, out = audit(tmp_path, {"pypi.json": VULNERABLE})
    assert code == 1, out
    assert "FINDING somepkg==1.0 GHSA-aaaa-bbbb-cccc (CVE-2026-0001): fixed in 1.2.1" in out
    assert "1 finding(s), 0 waived, 1 unwaived" in out


def test_a_waiver_by_alias_accepts_the_finding(tmp_path: Path) -> None:
    code, out = audit(tmp_path, {"pypi.json": VULNERABLE}, waiver(TOMORROW))
    assert code == 0, out
    assert f"waived  somepkg==1.0 GHSA-aaaa-bbbb-cccc (CVE-2026-0001): fixed in 1.2.1; until {TOMORROW}: not reachable" in out


def test_an_expired_waiver_fails_again(tmp_path: Path) -> None:
    code, out = audit(tmp_path, {"pypi.json": VULNERABLE}, waiver(YESTERDAY))
    assert code == 1, out
    assert f"its waiver expired on {YESTERDAY}" in out


def test_a_stale_waiver_is_reported(tmp_path: Path) -> None:
    clean = report({"name": "somepkg", "version": "1.3", "vulns": []})
    code, out = audit(tmp_path, {"pypi.json": clean}, waiver(TOMORROW))
    assert code == 0, out
    assert "waiver CVE-2026-0001 (SomePkg) matches no finding any more" in out


@pytest.mark.parametrize(
    ("waivers", "message"),
    [
        (waiver(TOMORROW, reason=" "), "reason is empty"),
        ('[[waiver]]\nid = "X"\npackage = "p"\nreason = "r"\n', "missing ['until']"),
        (waiver(TOMORROW) + 'colour = "blue"\n', "unknown ['colour']"),
        ('[[waiver]]\nid = "X"\npackage = "p"\nreason = "r"\nuntil = "soon"\n', "until must be a TOML date"),
        ("[waivers]\n", "unknown top-level key(s) ['waivers']"),
    ],
)
def test_bad_waiver_files_stop_the_audit(tmp_path: Path, waivers: str, message: str) -> None:
    code, out = audit(tmp_path, {"pypi.json": VULNERABLE}, waivers)
    assert code == 2, out
    assert message in out


def test_unreachable_services_say_so_and_pass_unless_required(tmp_path: Path) -> None:
    plays = {"pypi.json": ALL_SKIPPED, "osv.err": OSV_DOWN}
    code, out = audit(tmp_path, plays)
    assert code == 0, out
    assert "UNREACHABLE: no vulnerability service answered from this machine; NOTHING WAS AUDITED." in out
    assert "osv: unreachable" in out and "pypi: could look up none of the" in out
    code, out = audit(tmp_path, plays, env={"CDCNORM_AUDIT_REQUIRE": "1"})
    assert code == 2, out


def test_osv_is_asked_when_pypi_cannot_answer(tmp_path: Path) -> None:
    code, out = audit(tmp_path, {"pypi.json": ALL_SKIPPED, "osv.json": VULNERABLE})
    assert code == 1, out
    assert "FINDING somepkg==1.0" in out and "2/" in out


def test_a_pip_audit_crash_is_an_error_not_a_pass(tmp_path: Path) -> None:
    code, out = audit(tmp_path, {"pypi.err": "ValueError: something else broke"})
    assert code == 2, out
    assert "pip-audit -s pypi failed" in out
