# syntax=docker/dockerfile:1
# cdcnorm image: the normalization worker (`cdcnorm worker`), the Iceberg sink (`python -m sink`,
# Spark in local mode) and the CLI. Python 3.11 + a Java 17 runtime for Spark.
#
#   docker build -t cdcnorm:0.1.0 .                           # worker / sink / CLI (ENTRYPOINT cdcnorm)
#   docker build --target spark -t cdcnorm-spark:0.1.0 .     # Spark-on-Kubernetes driver/executor image
#
# The install is the one `make test` (.ci/run) proves on a clean checkout: `pip install` of the
# project with its pyproject.toml pins, minus the dev extra and not editable
# (tests/deploy/test_deploy.py keeps the two in step).
# bookworm: Debian 13 (trixie) has no openjdk-17 package.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------------- builder
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY transforms ./transforms
COPY service ./service
COPY sink ./sink
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --upgrade pip \
 && pip install --no-cache-dir .

# ----------------------------------------------------------------------------- runtime base
FROM ${PYTHON_IMAGE} AS runtime-base
# openjdk's postinst needs the man dir that the slim image drops; versions float with the
# bookworm security updates on purpose.
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 cdcnorm \
 && useradd --system --uid 10001 --gid cdcnorm --home-dir /home/cdcnorm --create-home \
      --shell /usr/sbin/nologin cdcnorm
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    JAVA_HOME=/usr/lib/jvm/java-17 \
    SPARK_HOME=/opt/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/venv/bin/python
WORKDIR /home/cdcnorm

# ------------------------------------------------------------------------------------ spark
# For the SparkApplication (k8s/overlays/production): Spark starts driver and executor pods
# with `driver ...` / `executor` as arguments; entrypoint.sh turns them into spark-submit / the
# executor backend, like Apache Spark's own images.
FROM runtime-base AS spark
COPY --chmod=0755 k8s/spark/entrypoint.sh /opt/cdcnorm/spark/entrypoint.sh
COPY --chmod=0644 k8s/spark/sink_main.py /opt/cdcnorm/spark/sink_main.py
USER 10001:10001
ENTRYPOINT ["/opt/cdcnorm/spark/entrypoint.sh"]

# ---------------------------------------------------------------------------------- runtime
FROM runtime-base AS runtime
USER 10001:10001
# web.port of pipeline.yaml: /healthz, /readyz, /metrics
EXPOSE 6066
# The worker's readiness (group joined, Redis answers). Kubernetes ignores HEALTHCHECK and uses
# the probes of k8s/base/worker-deployment.yaml; set CDCNORM_WEB_PORT when web.port differs.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('CDCNORM_WEB_PORT', '6066'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/readyz', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["cdcnorm"]
CMD ["--help"]
