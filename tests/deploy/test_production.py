"""Offline checks of the production path (issue 30): what the Spark pods load and trust, how the
pods stop, what they may do, and the alerts. Helpers (rendering, the Dockerfile's instructions,
the pod views) come from ``test_deploy``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
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
