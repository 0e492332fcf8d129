"""Offline checks of the production path (issue 30): what the Spark pods load and trust, how the
pods stop, what they may do, and the alerts. Helpers (rendering, the Dockerfile's instructions,
the pod views) come from ``test_deploy``."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.deploy.test_deploy import (
    ROOT,
    PodSpec,
    dockerfile,
    effective_config,
    one,
    pod_env,
    pod_specs,
    render,
)

PRODUCTION = "overlays/production"
SPARK = ROOT / "k8s" / "spark"
SITE_PACKAGES = f"/opt/venv/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages/"


def spark_app() -> dict[str, Any]:
    return one(render(PRODUCTION), "SparkApplication", "cdcnorm-sink")


def pods(target: str = PRODUCTION) -> dict[str, PodSpec]:
    return {pod.owner: pod for pod in pod_specs(render(target))}


def mounts(pod: PodSpec) -> dict[str, dict[str, Any]]:
    """mountPath -> the volume mounted there."""
    volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
    (container,) = pod.spec["containers"]
    return {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}


def stage_args(stage: str, keyword: str) -> list[str]:
    return [i.args for i in dockerfile() if i.stage == stage and i.keyword == keyword]


# ----------------------------------------------------------------------------- blocker 1: jars


def test_spark_pods_download_nothing_at_run_time() -> None:
    """No spark.jars.packages (each executor would resolve it with Ivy into its read-only working
    directory, from a Maven repository): the Iceberg jars are on the classpath from the image."""
    conf = spark_app()["spec"]["sparkConf"]
    for key in ("spark.jars.packages", "spark.jars.repositories", "spark.jars.ivy", "spark.jars.ivySettings"):
        assert key not in conf, f"sparkConf {key}: the pods would fetch jars at run time"
    for key in ("spark.jars", "spark.files", "spark.submit.pyFiles"):
        for uri in filter(None, conf.get(key, "").split(",")):
            assert uri.startswith("local://"), f"sparkConf {key} fetches {uri} at run time"
    assert conf["spark.driver.extraClassPath"] == conf["spark.executor.extraClassPath"] == "/opt/cdcnorm/jars/*"
    assert not any(k.startswith("spark.kubernetes.file.upload") for k in conf)


def test_spark_image_carries_the_iceberg_jars() -> None:
    """The spark stage puts the wheel's Iceberg runtime and the hash-checked AWS bundle (the jars
    stage, Maven at build time) into /opt/cdcnorm/jars, at the runtime's Iceberg version."""
    from sink.config import SinkConfig

    runs = " ".join(stage_args("spark", "RUN"))
    link = re.search(r"ln -s\s+(\S+)\s+(\S+)", runs)
    assert link, "the spark stage links the wheel's Iceberg runtime into /opt/cdcnorm/jars"
    source, target = link.groups()
    assert target.startswith("/opt/cdcnorm/jars/") and Path(source).name == Path(target).name
    relative = source.removeprefix(SITE_PACKAGES)
    import snowpark_connect_deps_iceberg

    wheel_root = Path(snowpark_connect_deps_iceberg.__file__).parent.parent
    assert relative != source and (wheel_root / relative).is_file(), f"{source} is not in the installed wheel"
    version = re.search(r"iceberg-spark-runtime-3\.5_2\.12-(\d+\.\d+\.\d+)\.jar$", source)
    assert version, source
    assert SinkConfig.model_fields["jar_packages"].default.endswith(f":{version.group(1)}"), "sink.jar_packages and the image's runtime differ"
    copies = [a for a in stage_args("spark", "COPY") if "--from=jars" in a]
    assert copies and copies[0].split()[-1] == "/opt/cdcnorm/jars/", copies
    # the jars stage: Maven fetches the pom's artifacts, sha256sum checks each one
    pom = ET.parse(SPARK / "jars.pom.xml").getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    iceberg = pom.find("m:properties/m:iceberg.version", ns)
    assert iceberg is not None and iceberg.text == version.group(1), "the AWS bundle must match the Iceberg runtime"
    artifacts = {
        f"{d.findtext('m:artifactId', namespaces=ns)}-{(d.findtext('m:version', namespaces=ns) or '').replace('${iceberg.version}', version.group(1))}.jar"
        for d in pom.findall("m:dependencies/m:dependency", ns)
    }
    assert "iceberg-aws-bundle-" + version.group(1) + ".jar" in artifacts, "S3FileIO needs Iceberg's AWS bundle"
    sums: dict[str, str] = {}
    for line in (SPARK / "jars.sha256").read_text(encoding="utf-8").splitlines():
        digest, name = line.split()
        sums[name] = digest
    assert set(sums) == artifacts, f"k8s/spark/jars.sha256 lists {sorted(sums)}, the pom {sorted(artifacts)}"
    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in sums.values())
    jars_runs = " ".join(stage_args("jars", "RUN"))
    assert "dependency:copy-dependencies" in jars_runs and "-DexcludeTransitive=true" in jars_runs
    assert "sha256sum --check" in jars_runs and "/jars.sha256" in jars_runs
    assert {"k8s/spark/jars.pom.xml", "k8s/spark/jars.sha256"} <= {a.split()[0] for a in stage_args("jars", "COPY")}


def test_spark_working_directory_is_a_volume() -> None:
    """Driver and executors write into their working directory (the files Spark ships to
    executors): the spark image's WORKDIR is an emptyDir in both, since the root filesystem is
    read-only; so are /tmp (spark.local.dir, HOME) and nothing else needs writing."""
    workdir = stage_args("spark", "WORKDIR")
    assert workdir, "the spark stage sets its WORKDIR"
    found = pods()
    for role in ("driver", "executor"):
        pod = found[f"SparkApplication/cdcnorm-sink/{role}"]
        mounted = mounts(pod)
        for path in (workdir[-1], "/tmp"):
            assert path in mounted, f"{role}: nothing writable at {path}"
            assert mounted[path].get("emptyDir", {}).get("sizeLimit"), f"{role}: {path} needs an emptyDir with a sizeLimit"
        assert pod.spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


# ----------------------------------------------------------------------------- blocker 2: the Kafka CA


KAFKA_CLIENTS = ("Deployment/cdcnorm-worker", "SparkApplication/cdcnorm-sink/driver", "SparkApplication/cdcnorm-sink/executor")


def test_every_kafka_client_trusts_the_cluster_ca() -> None:
    """The worker, the sink's driver and its executors (which open consumers with the driver's
    settings, ssl.ca.location included) mount the required CA Secret where broker.ssl_cafile
    points; KEDA's TriggerAuthentication gives its kafka scaler the same CA."""
    config = effective_config(PRODUCTION)
    broker = config.broker
    assert broker.security_protocol.value in ("SSL", "SASL_SSL")
    assert broker.ssl_cafile is not None
    found = pods()
    docs = render(PRODUCTION)
    # effective_config laid the pod's files out in a temporary root: the path as the pod sees it
    cafile = pod_env(docs, found["Deployment/cdcnorm-worker"])["KAFKA_SSL_CAFILE"]
    assert str(broker.ssl_cafile).endswith(cafile) and cafile == "/etc/kafka-tls/ca.crt", cafile
    for owner in KAFKA_CLIENTS:
        volume = mounts(found[owner]).get(str(Path(cafile).parent))
        assert volume and "secret" in volume, f"{owner}: no CA Secret at {Path(cafile).parent}"
        secret = volume["secret"]
        assert secret["secretName"] == "cdcnorm-kafka-tls" and not secret.get("optional", False), owner
        assert {"key": "ca.crt", "path": Path(cafile).name} in secret["items"], owner
    scaled = one(docs, "ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["metadata"]["tls"] == "enable"
    auth = one(docs, "TriggerAuthentication", trigger["authenticationRef"]["name"])
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert refs.get("ca") == ("cdcnorm-kafka-tls", "ca.crt"), "KEDA's TLS needs the cluster CA"


# ----------------------------------------------------------------------------- alerts


RUNBOOKS = ROOT / "docs" / "runbooks.md"
RELEASE_LABEL = ("release", "kube-prometheus-stack")


def alert_rules() -> list[dict[str, Any]]:
    rule = one(render(PRODUCTION), "PrometheusRule")
    return [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]


def mkdocs_anchor(heading: str) -> str:
    """The anchor Python-Markdown's toc gives a heading (its default slugify)."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[-\s]+", "-", text).strip("-")


def test_every_alert_has_a_runbook_and_a_severity() -> None:
    anchors = {mkdocs_anchor(h) for h in re.findall(r"^#{2,3} (.+)$", RUNBOOKS.read_text(encoding="utf-8"), re.M)}
    rules = alert_rules()
    assert len(rules) >= 15
    names = [r["alert"] for r in rules]
    assert len(set(names)) == len(names), "alert names repeat"
    for rule in rules:
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        annotations = rule["annotations"]
        assert annotations.get("summary") and annotations.get("description"), f"{name}: summary and description"
        url = annotations.get("runbook_url", "")
        match = re.fullmatch(r"https://[\w.-]+/runbooks/#([\w-]+)", url)
        assert match, f"{name}: runbook_url {url!r} is not a link to a section of the runbooks page"
        assert match.group(1) == name.lower(), f"{name}: its runbook anchor is {match.group(1)}"
        assert match.group(1) in anchors, f"{name}: docs/runbooks.md has no section {match.group(1)}"
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), f"{name}: {expr}"
    # and no runbook section without its alert
    assert anchors == {n.lower() for n in names}, f"runbooks without an alert: {sorted(anchors - {n.lower() for n in names})}"


def test_prometheus_selects_the_rules_and_monitors() -> None:
    """kube-prometheus-stack's default selectors match its Helm release label."""
    docs = render(PRODUCTION)
    for doc in [one(docs, "PrometheusRule"), *[d for d in docs if d["kind"] == "ServiceMonitor"]]:
        labels = doc["metadata"]["labels"]
        assert labels.get(RELEASE_LABEL[0]) == RELEASE_LABEL[1], f"{doc['kind']}/{doc['metadata']['name']}: {labels}"


def test_a_missing_scrape_target_alerts() -> None:
    """Each ServiceMonitor's job (the Service it selects, Prometheus Operator's default job label)
    has an alert on ``absent(up{job=...} == 1)``: a crash-looping worker or a missing sink driver
    stops exporting everything the other alerts read."""
    docs = render(PRODUCTION)
    services = [d for d in docs if d["kind"] == "Service"]
    exprs = [r["expr"] for r in alert_rules()]
    for monitor in (d for d in docs if d["kind"] == "ServiceMonitor"):
        assert "jobLabel" not in monitor["spec"], "the job label is the Service name"
        selector = monitor["spec"]["selector"]["matchLabels"]
        (service,) = [s for s in services if selector.items() <= s["metadata"].get("labels", {}).items()]
        job = service["metadata"]["name"]
        assert any(re.search(rf'absent\(up\{{job="{job}"\}} == 1\)', e) for e in exprs), f"no absent(up) alert for job {job}"


def test_lag_alerts_read_the_brokers_view_of_the_worker_group() -> None:
    """The lag alerts use the Kafka Exporter's per-partition series of the worker's group
    (worker.app_id); none sums the workers' per-pod gauges, which overlap across a rebalance."""
    group = effective_config(PRODUCTION).worker.app_id
    rules = {r["alert"]: r["expr"] for r in alert_rules()}
    for name in ("CdcnormConsumerLagGrowing", "CdcnormPartitionStuck", "CdcnormLagUnknown"):
        assert f'kafka_consumergroup_lag{{consumergroup="{group}"}}' in rules[name], name
    assert "kafka_consumergroup_current_offset" in rules["CdcnormPartitionStuck"]
    for name, expr in rules.items():
        assert "cdcnorm_consumer_lag" not in expr, f"{name} sums the per-pod lag gauges"


# ----------------------------------------------------------------------------- shutdown


PRESTOP = SPARK / "prestop.sh"


def test_spark_pods_run_under_tini_and_the_driver_drains_first() -> None:
    """tini is PID 1 of driver and executor (installed in the spark image); the driver's preStop
    hook is the image's prestop.sh; its grace period covers the sink's drain: the micro-batch and
    the join of table maintenance (sink.maintenance.Maintenance.close)."""
    import inspect

    from sink.maintenance import Maintenance

    entrypoint = (SPARK / "entrypoint.sh").read_text(encoding="utf-8")
    assert "TINI=(/usr/bin/tini -s --)" in entrypoint
    assert entrypoint.count('exec "${TINI[@]}"') == 2, "driver and executor both start under tini"
    assert "tini" in " ".join(stage_args("spark", "RUN")), "the spark image installs Debian's tini"
    copies = {a.split()[-1]: a.split()[-2] for a in stage_args("spark", "COPY") if "--from" not in a}
    assert copies.get("/opt/cdcnorm/spark/prestop.sh") == "k8s/spark/prestop.sh" and "--chmod=0755" in " ".join(
        a for a in stage_args("spark", "COPY") if "prestop.sh" in a)
    join = inspect.signature(Maintenance.close).parameters["timeout"].default
    drain = int(re.search(r"CDCNORM_DRAIN_TIMEOUT_S:-(\d+)", PRESTOP.read_text(encoding="utf-8")).group(1))  # type: ignore[union-attr]
    driver = spark_app()["spec"]["driver"]
    assert driver["lifecycle"]["preStop"]["exec"]["command"] == ["/opt/cdcnorm/spark/prestop.sh"]
    grace = driver["terminationGracePeriodSeconds"]
    assert join + 120 <= drain < grace, f"maintenance join {join}s + a micro-batch <= drain {drain}s < grace {grace}s"
    local = one(render("overlays/local"), "Deployment", "cdcnorm-sink")["spec"]["template"]["spec"]
    assert local["terminationGracePeriodSeconds"] >= join + 120, "the local sink's grace must cover the maintenance join"


def _fake_sink(tmp_path: Path, main: Path, *, ignore_term: bool) -> subprocess.Popen[bytes]:
    """A Python process whose arguments are those of the driver's sink: ``python <main> --config ...``."""
    main.parent.mkdir(parents=True, exist_ok=True)
    drain = "return" if ignore_term else "time.sleep(1.0); marks.write_text('term drained'); sys.exit(0)"
    main.write_text(
        "import pathlib, signal, sys, time\n"
        f"marks = pathlib.Path({str(tmp_path / 'marks')!r})\n"
        "def term(*_):\n"
        "    marks.write_text('term')\n"
        f"    {drain}\n"
        "signal.signal(signal.SIGTERM, term)\n"
        "marks.write_text('ready')\n"
        "while True: time.sleep(0.1)\n",
        encoding="utf-8",
    )
    proc = subprocess.Popen([sys.executable, str(main), "--config", "/etc/cdcnorm/pipeline.yaml"])
    deadline = time.monotonic() + 20
    while not (tmp_path / "marks").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def _prestop(main: Path, log: Path, timeout_s: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CDCNORM_DRAIN_PATTERN": str(main), "CDCNORM_DRAIN_TIMEOUT_S": str(timeout_s),
           "CDCNORM_DRAIN_LOG": str(log)}
    return subprocess.run(["bash", str(PRESTOP)], env=env, capture_output=True, text=True, timeout=60)


def test_prestop_drains_the_python_sink_and_waits_for_it(tmp_path: Path) -> None:
    """The hook signals only the Python process running the sink's main file (not a JVM or shell
    whose arguments name it too) and returns once it has exited after its drain."""
    main = tmp_path / "opt" / "sink_main.py"
    sink = _fake_sink(tmp_path, main, ignore_term=False)
    # a JVM-like process whose arguments name the main file as well: it must not be signalled
    decoy = subprocess.Popen(["bash", "-c", "sleep 30", "SparkSubmit", str(main)])
    log = tmp_path / "prestop.log"
    try:
        started = time.monotonic()
        proc = _prestop(main, log, timeout_s=30)
        assert proc.returncode == 0, log.read_text(encoding="utf-8")
        assert (tmp_path / "marks").read_text(encoding="utf-8") == "term drained"
        assert time.monotonic() - started >= 0.9, "the hook returned before the sink had drained"
        assert sink.wait(timeout=5) == 0
        assert decoy.poll() is None, "the hook signalled a process that is not the Python sink"
        text = log.read_text(encoding="utf-8")
        assert f"SIGTERM to the sink (pid {sink.pid})" in text and "the sink stopped" in text
    finally:
        for p in (sink, decoy):
            p.kill()
            p.wait()


def test_prestop_gives_up_at_its_timeout_and_without_a_sink(tmp_path: Path) -> None:
    main = tmp_path / "opt" / "sink_main.py"
    log = tmp_path / "prestop.log"
    assert _prestop(main, log, timeout_s=2).returncode == 0
    assert "nothing to drain" in log.read_text(encoding="utf-8")
    sink = _fake_sink(tmp_path, main, ignore_term=True)
    try:
        proc = _prestop(main, log, timeout_s=2)
        assert proc.returncode == 1
        assert "still running after 2s" in log.read_text(encoding="utf-8")
        assert sink.poll() is None and (tmp_path / "marks").read_text(encoding="utf-8") == "term"
    finally:
        sink.kill()
        sink.wait()


# ----------------------------------------------------------------------------- least privilege


def test_spark_accounts_have_only_what_they_use() -> None:
    """The driver's Role: executor pods and their config map, named verbs only; the executors run
    under their own account with no token and no binding; driver and executors authenticate to
    each other and encrypt their traffic (the SASL password travels in task closures)."""
    docs = render(PRODUCTION)
    spec = spark_app()["spec"]
    driver_account, executor_account = spec["driver"]["serviceAccount"], spec["executor"]["serviceAccount"]
    assert driver_account != executor_account
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    assert accounts[executor_account].get("automountServiceAccountToken") is False
    assert accounts["cdcnorm"].get("automountServiceAccountToken") is False, "the worker's account has no token"
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    bound = {s["name"] for b in bindings for s in b["subjects"] if s["kind"] == "ServiceAccount"}
    assert bound == {driver_account}, f"only the driver's account may be bound: {bound}"
    (binding,) = bindings
    role = one(docs, "Role", binding["roleRef"]["name"])
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in role["rules"]}
    assert rules == {
        (("",), ("pods",)): {"get", "list", "watch", "create", "patch", "delete", "deletecollection"},
        (("",), ("configmaps",)): {"get", "list", "create", "delete", "deletecollection"},
    }, rules
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    conf = spec["sparkConf"]
    assert conf["spark.authenticate"] == "true" and conf["spark.network.crypto.enabled"] == "true"
    assert conf["spark.kubernetes.driver.service.deleteOnTermination"] == "false", "else the driver needs services rights"
    for pod in pods().values():
        if pod.owner.startswith(("Deployment/", "SparkApplication/cdcnorm-sink/executor")):
            account = accounts[pod.spec["serviceAccountName"]]
            assert account.get("automountServiceAccountToken") is False or pod.spec.get("automountServiceAccountToken") is False


def kafka_users() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in render(PRODUCTION) if d["kind"] == "KafkaUser"}


def grants(user: dict[str, Any], kind: str, name: str, operation: str) -> bool:
    """True when one of the user's ACLs allows ``operation`` on the resource ``kind``/``name``."""
    for acl in user["spec"]["authorization"]["acls"]:
        resource = acl["resource"]
        if resource["type"] != kind or operation not in acl["operations"]:
            continue
        pattern = resource.get("patternType", "literal")
        if (pattern == "literal" and resource["name"] == name) or (pattern == "prefix" and name.startswith(resource["name"])):
            return True
    return False


def test_one_kafka_user_per_workload() -> None:
    """KafkaUsers cdcnorm-worker, cdcnorm-sink and cdcnorm-keda (SCRAM-SHA-512, simple ACLs): each
    workload logs in as its own user with the password file of that user's Secret."""

    docs = render(PRODUCTION)
    users = kafka_users()
    assert set(users) == {"cdcnorm-worker", "cdcnorm-sink", "cdcnorm-keda"}
    bootstrap = effective_config(PRODUCTION).broker.bootstrap_servers[0]
    for resource in users.values():
        assert resource["spec"]["authentication"]["type"] == "scram-sha-512"
        assert resource["spec"]["authorization"]["type"] == "simple"
        cluster = resource["metadata"]["labels"]["strimzi.io/cluster"]
        assert bootstrap.startswith(f"{cluster}-kafka-bootstrap."), f"{cluster} is not the cluster of {bootstrap}"
    found = pods()
    for owner, name in (("Deployment/cdcnorm-worker", "cdcnorm-worker"), ("SparkApplication/cdcnorm-sink/driver", "cdcnorm-sink")):
        env = pod_env(docs, found[owner])
        assert env["KAFKA_SASL_USERNAME"] == name
        directory = str(Path(env["KAFKA_SASL_PASSWORD_FILE"]).parent)
        secret = mounts(found[owner])[directory]["secret"]
        assert secret["secretName"] == name, f"{owner} mounts {secret['secretName']}, not its user's Secret"
    executor = found["SparkApplication/cdcnorm-sink/executor"]
    assert not [v for v in mounts(executor).values() if v.get("secret", {}).get("secretName") in users], (
        "executors get the password in the driver's closures, not from a mounted Secret")
    auth = one(docs, "TriggerAuthentication")
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert refs["password"] == ("cdcnorm-keda", "password")
    username = one(docs, "Secret", refs["username"][0])


    value = username.get("stringData", {}).get("username") or base64.b64decode(username["data"]["username"]).decode()
    assert value == "cdcnorm-keda"


def test_kafka_acls_follow_the_config() -> None:
    """What the config makes each workload read and write is granted, and nothing else: the
    sink writes nothing, KEDA only describes, nobody may create topics but the metadata log's owner."""
    config = effective_config(PRODUCTION)
    users = kafka_users()
    worker, sink, keda = users["cdcnorm-worker"], users["cdcnorm-sink"], users["cdcnorm-keda"]
    sources = [e.name for e in config.topics if e.name] + [
        re.sub(r"\\\.\.\*$", ".x", e.pattern) for e in config.topics if e.pattern]
    assert any(s.startswith("legacy.") for s in sources)
    for topic in sources:
        assert grants(worker, "topic", topic, "Read") and grants(keda, "topic", topic, "Describe"), topic
    assert grants(worker, "group", config.worker.app_id, "Read") and grants(keda, "group", config.worker.app_id, "Describe")
    outputs = {config.topic_prefix, config.transaction_topic, f"{config.topic_prefix}.shop.customers",
               *(e.output_dlq_topic(config.topic_prefix) for e in config.topics)}
    for topic in outputs:
        assert grants(worker, "topic", topic, "Write") and not grants(worker, "topic", topic, "Read"), topic
    for operation in ("Read", "Write", "DescribeConfigs"):
        assert grants(worker, "topic", config.metadata_topic, operation), f"metadata log: {operation}"
    from sink.config import SinkConfig

    sink_config = SinkConfig.model_validate(config.sink)
    assert sink_config.topic_pattern is not None
    assert grants(sink, "topic", f"{config.topic_prefix}.shop.customers", "Read")
    assert re.fullmatch(sink_config.topic_pattern, f"{config.topic_prefix}.shop.customers")
    assert grants(sink, "group", sink_config.group_id, "Read")
    for user in users.values():
        operations = {op for acl in user["spec"]["authorization"]["acls"] for op in acl["operations"]}
        assert not operations & {"All", "Create", "Delete", "Alter", "AlterConfigs", "ClusterAction"}, operations
        assert all(acl["resource"]["type"] in ("topic", "group") for acl in user["spec"]["authorization"]["acls"])
    assert {op for acl in sink["spec"]["authorization"]["acls"] for op in acl["operations"]} == {"Describe", "Read"}
    assert {op for acl in keda["spec"]["authorization"]["acls"] for op in acl["operations"]} == {"Describe"}


def test_kafka_topics_exist_for_what_the_worker_writes() -> None:
    """With auto-creation off, the topics whose names the config fixes are KafkaTopics: the
    schema-change, transaction and dead-letter topics, replicated, and the metadata log,
    compacted with one partition."""
    config = effective_config(PRODUCTION)
    topics = {d["spec"]["topicName"]: d for d in render(PRODUCTION) if d["kind"] == "KafkaTopic"}
    fixed = {config.topic_prefix, config.transaction_topic, config.metadata_topic,
             *(e.output_dlq_topic(config.topic_prefix) for e in config.topics)}
    assert fixed <= set(topics), f"no KafkaTopic for {sorted(fixed - set(topics))}"
    for name, topic in topics.items():
        spec = topic["spec"]
        assert spec["replicas"] >= 3 and spec["config"]["min.insync.replicas"] == "2", name
        assert topic["metadata"]["labels"]["strimzi.io/cluster"] == "cdc-prod"
    metadata = topics[config.metadata_topic]["spec"]
    assert metadata["partitions"] == 1 and metadata["config"]["cleanup.policy"] == "compact"


# ----------------------------------------------------------------------------- prerequisites


def test_prerequisites_are_documented_with_their_checks() -> None:
    """docs/operations.md's Prerequisites name each operator with the command that checks it (the
    spark-operator's mutating webhook and jobNamespaces among them) and every Secret a production
    pod mounts that neither kustomize nor Strimzi's User Operator creates."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text[text.index("### Prerequisites"):text.index("### Topics and Kafka users")]
    for needle in ("kubectl get mutatingwebhookconfigurations", "jobNamespaces", "watchedNamespace",
                   "scaledobjects.keda.sh", "prometheusrules.monitoring.coreos.com", "NetworkPolic", "kafkaExporter"):
        assert needle in section, f"Prerequisites: no {needle}"
    docs = render(PRODUCTION)
    generated = {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"}
    strimzi = set(kafka_users())
    mounted = {v["secret"]["secretName"] for pod in pods().values() for v in pod.spec.get("volumes", []) if "secret" in v}
    auth = one(docs, "TriggerAuthentication")
    mounted |= {r["name"] for r in auth["spec"]["secretTargetRef"]}
    for name in sorted(mounted - generated - strimzi):
        assert f"`{name}`" in section, f"Prerequisites: the Secret {name} is mounted but not listed"


# ----------------------------------------------------------------------------- network policies


@dataclass(frozen=True)
class Peer:
    """A pod (labels, namespace labels) or an address outside the cluster's pods (``ip``)."""

    labels: tuple[tuple[str, str], ...] = ()
    namespace: str = "cdcnorm"
    ip: bool = False


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    return selector is not None and selector.get("matchLabels", {}).items() <= labels.items() and not selector.get("matchExpressions")


def _peer_matches(rule_peer: dict[str, Any], peer: Peer) -> bool:
    if "ipBlock" in rule_peer:
        return peer.ip and rule_peer["ipBlock"]["cidr"] == "0.0.0.0/0"
    if peer.ip:
        return False
    namespaces = rule_peer.get("namespaceSelector")
    in_namespace = _selects(namespaces, {"kubernetes.io/metadata.name": peer.namespace}) if namespaces is not None \
        else peer.namespace == "cdcnorm"
    return in_namespace and _selects(rule_peer.get("podSelector", {}), dict(peer.labels))


def allowed(docs: list[dict[str, Any]], pod: dict[str, str], direction: str, peer: Peer, port: int) -> bool:
    """Whether the NetworkPolicies of ``docs`` let ``pod`` (in cdcnorm) talk to ``peer`` on ``port``
    (``direction`` Egress) or hear from it (Ingress): some policy selecting the pod for that
    direction has a rule naming the peer and the port. A pod no policy selects for it is open."""
    policies = [d["spec"] for d in docs if d["kind"] == "NetworkPolicy"
                and _selects(d["spec"]["podSelector"], pod) and direction in d["spec"]["policyTypes"]]
    if not policies:
        return True
    key, side = ("egress", "to") if direction == "Egress" else ("ingress", "from")
    for policy in policies:
        for rule in policy.get(key, []):
            ports = {p["port"] for p in rule.get("ports", [])}
            if ports and port not in ports:
                continue
            if any(_peer_matches(p, peer) for p in rule.get(side, [])):
                return True
    return False


def test_network_policies_allow_what_the_pods_use_and_nothing_else() -> None:
    docs = render(PRODUCTION)
    config = effective_config(PRODUCTION)
    conf = spark_app()["spec"]["sparkConf"]
    labels = {owner: pod.labels for owner, pod in pods().items()}
    worker = labels["Deployment/cdcnorm-worker"]
    driver = labels["SparkApplication/cdcnorm-sink/driver"]
    executor = labels["SparkApplication/cdcnorm-sink/executor"]
    kafka_port = int(config.broker.bootstrap_servers[0].rsplit(":", 1)[1])
    broker = Peer((("strimzi.io/cluster", "cdc-prod"), ("strimzi.io/kind", "Kafka")), namespace="kafka")
    prometheus = Peer((("app.kubernetes.io/name", "prometheus"),), namespace="monitoring")
    dns = Peer((("k8s-app", "kube-dns"),), namespace="kube-system")
    outside = Peer(ip=True)
    catalog_port = int(re.search(r":(\d+)$", config.sink["catalog"]["properties"]["uri"]).group(1))  # type: ignore[union-attr]
    redis_port = int(re.search(r":(\d+)/", config.redis.url).group(1))  # type: ignore[union-attr]
    driver_port, block_port = int(conf["spark.driver.port"]), int(conf["spark.blockManager.port"])
    assert int(conf["spark.driver.blockManager.port"]) == block_port
    catalog = Peer(namespace="lakehouse")
    # a default deny for everything in the namespace, both ways
    assert allowed(docs, {"app": "something-else"}, "Ingress", Peer(), 80) is False
    assert allowed(docs, {"app": "something-else"}, "Egress", outside, 443) is False
    for pod in (worker, driver, executor):
        assert allowed(docs, pod, "Egress", dns, 53)
        assert allowed(docs, pod, "Egress", broker, kafka_port)
        assert not allowed(docs, pod, "Egress", outside, 9092), "no other broker port"
    # the worker: scraped; Redis; nothing else
    assert allowed(docs, worker, "Ingress", prometheus, config.web.port)
    assert allowed(docs, worker, "Egress", outside, redis_port)
    assert not allowed(docs, worker, "Egress", outside, 443) and not allowed(docs, worker, "Ingress", Peer(tuple(executor.items())), 6066)
    # the driver: scraped, reached by executors; the API, the catalog, the object store, executors
    assert allowed(docs, driver, "Ingress", prometheus, 9108)
    for port in (driver_port, block_port):
        assert allowed(docs, driver, "Ingress", Peer(tuple(executor.items())), port)
        assert allowed(docs, executor, "Egress", Peer(tuple(driver.items())), port)
    assert not allowed(docs, driver, "Ingress", Peer(tuple(worker.items())), driver_port)
    assert not allowed(docs, driver, "Egress", outside, redis_port), "the sink uses no Redis"
    assert allowed(docs, driver, "Egress", outside, 443) and allowed(docs, driver, "Egress", catalog, catalog_port)
    assert allowed(docs, driver, "Egress", Peer(tuple(executor.items())), block_port)
    # executors: each other's block managers, the object store, the catalog; not the API's 6443
    assert allowed(docs, executor, "Ingress", Peer(tuple(executor.items())), block_port)
    assert allowed(docs, executor, "Egress", Peer(tuple(executor.items())), block_port)
    assert allowed(docs, executor, "Egress", outside, 443) and allowed(docs, executor, "Egress", catalog, catalog_port)
    assert not allowed(docs, executor, "Egress", outside, 6443)
    assert not allowed(docs, executor, "Ingress", prometheus, 9108)


def test_local_redis_and_broker_answer_only_cdcnorm() -> None:
    docs = render("overlays/local")
    found = pods("overlays/local")
    redis, broker = found["StatefulSet/redis"].labels, found["Deployment/kafka"].labels
    worker, sink = found["Deployment/cdcnorm-worker"].labels, found["Deployment/cdcnorm-sink"].labels
    assert allowed(docs, redis, "Ingress", Peer(tuple(worker.items())), 6379)
    assert not allowed(docs, redis, "Ingress", Peer(tuple(sink.items())), 6379), "the sink uses no Redis"
    assert not allowed(docs, redis, "Ingress", Peer((("app", "other"),)), 6379)
    for client in (worker, sink):
        assert allowed(docs, broker, "Ingress", Peer(tuple(client.items())), 9092)
    assert not allowed(docs, broker, "Ingress", Peer((("app", "other"),)), 9092)


# ----------------------------------------------------------------------------- Spark sizing


def _gib(value: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)([mgMG])", value).groups()  # type: ignore[union-attr]
    return float(number) / (1024 if unit.lower() == "m" else 1)


def test_spark_sizing_is_explicit_and_cluster_mode_clean() -> None:
    """Python workers get memory of their own; overheads are set, not defaulted; the sink's
    shuffle partitions yield to the SparkApplication's; no spark.driver.memory where it does
    nothing (the driver's JVM is running before the sink sets its conf)."""
    spec = spark_app()["spec"]
    conf = spec["sparkConf"]
    pyspark = _gib(conf["spark.executor.pyspark.memory"])
    executor = spec["executor"]
    assert executor.get("memoryOverhead") and spec["driver"].get("memoryOverhead")
    pod = _gib(executor["memory"]) + _gib(executor["memoryOverhead"]) + pyspark
    assert pyspark >= _gib(executor["memory"]), "the Python workers do the per-record work: give them the larger share"
    assert pod <= 8, f"an executor pod of {pod} GiB"
    assert int(conf["spark.sql.shuffle.partitions"]) >= executor["instances"] * executor["cores"]
    for target, owner in ((PRODUCTION, "SparkApplication/cdcnorm-sink/driver"), ("overlays/local", "Deployment/cdcnorm-sink")):
        sink = effective_config(target, owner).sink
        assert sink is not None
        assert "spark.driver.memory" not in sink.get("spark_conf", {}), f"{owner}: spark.driver.memory does nothing in cluster mode"
        assert "spark.driver.memory" not in conf


# ----------------------------------------------------------------------------- autoscaling and rollout


def test_autoscaling_skips_persistent_lag_and_scales_in_bounded_steps() -> None:
    docs = render(PRODUCTION)
    scaled = one(docs, "ScaledObject")
    spec = scaled["spec"]
    (trigger,) = spec["triggers"]
    assert trigger["metadata"]["excludePersistentLag"] == "true", "one poison partition must not scale to max"
    fallback = spec["fallback"]
    assert fallback["failureThreshold"] >= 3 and spec["minReplicaCount"] <= fallback["replicas"] <= spec["maxReplicaCount"]
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    up, down = behavior["scaleUp"], behavior["scaleDown"]
    assert up["selectPolicy"] == "Min" and up["stabilizationWindowSeconds"] >= 30
    pods_step = [p for p in up["policies"] if p["type"] == "Pods"]
    assert pods_step and pods_step[0]["value"] <= spec["maxReplicaCount"] // 4, "scale up in steps, not to max at once"
    assert all(p["periodSeconds"] >= 60 for p in up["policies"])
    assert down["stabilizationWindowSeconds"] >= 300 and down["policies"][0]["value"] == 1


def test_worker_rollout_and_disruptions_are_sized_for_rebalances() -> None:
    """A rollout of the largest group takes a few waves, not one rebalance pair per pod; a pod
    leaves only after its replacement joined; an unhealthy worker never blocks a drain; replicas
    spread over zones and nodes."""
    docs = render(PRODUCTION)
    worker = one(docs, "Deployment", "cdcnorm-worker")["spec"]
    rolling = worker["strategy"]["rollingUpdate"]
    assert rolling["maxUnavailable"] == 0
    surge = rolling["maxSurge"]
    high = one(docs, "ScaledObject")["spec"]["maxReplicaCount"]
    per_wave = -(-high * int(surge.rstrip("%")) // 100) if isinstance(surge, str) else surge
    assert high / per_wave <= 6, f"{high} replicas roll in {high / per_wave:.0f} waves of {per_wave}"
    assert worker["minReadySeconds"] >= effective_config(PRODUCTION).broker.session_timeout_s / 2
    pdb = one(docs, "PodDisruptionBudget", "cdcnorm-worker")["spec"]
    assert pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow" and pdb["maxUnavailable"] == 1
    spread = {c["topologyKey"]: c for c in worker["template"]["spec"]["topologySpreadConstraints"]}
    assert {"topology.kubernetes.io/zone", "kubernetes.io/hostname"} <= set(spread)
    for constraint in spread.values():
        assert constraint["labelSelector"]["matchLabels"].items() <= worker["template"]["metadata"]["labels"].items()


def test_every_empty_dir_has_a_size_limit() -> None:
    for target in ("overlays/local", PRODUCTION):
        for pod in pod_specs(render(target)):
            for volume in pod.spec.get("volumes", []):
                if "emptyDir" in volume:
                    assert volume["emptyDir"].get("sizeLimit"), f"{target} {pod.owner}: emptyDir {volume['name']} has no sizeLimit"
