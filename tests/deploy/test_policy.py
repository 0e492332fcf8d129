"""The policy linter: checkov (its own venv, ``scripts/ensure-checkov``) on the rendered overlays
and on the Dockerfile, offline. Every finding must be fixed or listed, with its reason, in
``k8s/policy/exceptions.yaml``; an exception that matches no finding any more fails too, so the
list stays the minimal one.

checkov was chosen over kube-linter (a Go binary the Go module proxy does not serve here) and
kubeconform (schema validation only, which ``kubernetes-validate`` already does): it is a policy
linter with about a hundred Kubernetes checks (security contexts, probes, resources, RBAC,
NetworkPolicies, secrets as files, image pinning) plus Dockerfile checks, installs from PyPI with
its dependencies hash-locked, and runs without a network.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_deploy import DOCKERFILE, ROOT, render

EXCEPTIONS = ROOT / "k8s" / "policy" / "exceptions.yaml"
OVERLAYS = {"local": "overlays/local", "production": "overlays/production"}
INSTALL = "run `scripts/ensure-checkov` (scripts/check-deploy-tools runs it; it needs the package index once)"


@dataclass(frozen=True)
class Finding:
    check: str
    where: str
    resource: str
    name: str

    def __str__(self) -> str:
        return f"{self.check} ({self.name}) in {self.where}: {self.resource}"


def _checkov() -> str:
    venv = Path(os.environ.get("CHECKOV_VENV", ROOT / ".venv-checkov"))
    if not venv.is_absolute():
        venv = ROOT / venv
    checkov = venv / "bin" / "checkov"
    if not checkov.is_file():
        pytest.fail(f"checkov is not installed at {checkov}: {INSTALL}", pytrace=False)
    return str(checkov)


def _run(args: list[str], cwd: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false", "LOG_LEVEL": "WARNING"}
    proc = subprocess.run(
        [_checkov(), *args, "--skip-download", "--quiet", "--compact", "--output", "json"],
        capture_output=True, text=True, timeout=300, cwd=cwd, env=env,
    )
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        pytest.fail(f"checkov {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", pytrace=False)
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    for report in reports:
        assert report["summary"]["parsing_errors"] == 0, f"checkov could not parse: {report['summary']}"
    return list(reports)


@functools.cache
def findings(tmp: str) -> tuple[Finding, ...]:
    """Every failed check of the rendered overlays and of the Dockerfile."""
    out: list[Finding] = []
    root = Path(tmp)
    for where, target in OVERLAYS.items():
        (root / f"{where}.yaml").write_text(yaml.safe_dump_all(render(target), sort_keys=False), encoding="utf-8")
    reports = _run(["--directory", str(root), "--framework", "kubernetes"], root)
    passed = sum(r["summary"]["passed"] for r in reports)
    assert passed > 300, f"checkov ran {passed} passing kubernetes checks; did it read the manifests?"
    for report in reports:
        for failed in report["results"]["failed_checks"]:
            where = Path(failed["file_path"]).stem
            out.append(Finding(failed["check_id"], where, failed["resource"], failed["check_name"]))
    for report in _run(["--file", DOCKERFILE.name, "--framework", "dockerfile"], DOCKERFILE.parent):
        assert report["summary"]["passed"] > 50, "checkov ran no dockerfile checks"
        for failed in report["results"]["failed_checks"]:
            out.append(Finding(failed["check_id"], "Dockerfile", failed["resource"], failed["check_name"]))
    return tuple(out)


def exceptions() -> Iterator[tuple[int, dict[str, Any]]]:
    entries = yaml.safe_load(EXCEPTIONS.read_text(encoding="utf-8"))
    assert isinstance(entries, list) and entries, f"{EXCEPTIONS} holds a list of exceptions"
    for index, entry in enumerate(entries):
        assert set(entry) == {"check", "where", "resources", "reason"}, f"exception {index}: keys {sorted(entry)}"
        assert entry["where"] in (*OVERLAYS, "Dockerfile"), f"exception {index}: where={entry['where']}"
        assert isinstance(entry["reason"], str) and len(entry["reason"].split()) >= 5, f"exception {index}: give a reason"
        assert entry["resources"], f"exception {index}: name the resources"
        yield index, entry


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> tuple[Finding, ...]:
    return findings(str(tmp_path_factory.mktemp("checkov")))


def test_policy_linter_finds_nothing_unexcepted(found: tuple[Finding, ...]) -> None:
    excepted = {(e["check"], e["where"], r) for _, e in exceptions() for r in e["resources"]}
    open_findings = [f for f in found if (f.check, f.where, f.resource) not in excepted]
    assert not open_findings, "checkov findings (fix them, or add a reasoned entry to k8s/policy/exceptions.yaml):\n" + \
        "\n".join(map(str, open_findings))


def test_policy_exceptions_are_all_still_needed(found: tuple[Finding, ...]) -> None:
    keys = {(f.check, f.where, f.resource) for f in found}
    stale = [f"exception {i} ({e['check']} in {e['where']}): {r}" for i, e in exceptions() for r in e["resources"]
             if (e["check"], e["where"], r) not in keys]
    assert not stale, "exceptions that match no finding any more (remove them):\n" + "\n".join(stale)
