#!/usr/bin/env bash
# Entry point of the cdcnorm `spark` image for Spark on Kubernetes (SparkApplication driver and
# executor pods). Spark starts these pods with `driver ...` or `executor` as arguments, like the
# entrypoint.sh of Apache Spark's own images (Apache-2.0), which this follows for Spark 3.5.
# Anything else is run as a command, so `docker run cdcnorm-spark cdcnorm --help` works.
#
# Driver and executor run under tini (Debian's package, /usr/bin/tini), as in Spark's own images:
# PID 1 that forwards the pod's signals to the JVM and reaps the Python workers Spark forks. The
# driver's Python sink is drained before that by the pod's preStop hook (prestop.sh beside this
# file), since a SIGTERM to the JVM would stop the SparkContext under it.
set -euo pipefail
TINI=(/usr/bin/tini -s --)

: "${SPARK_HOME:?SPARK_HOME must point at the pyspark installation}"
: "${JAVA_HOME:?JAVA_HOME must point at the Java 17 runtime}"

export SPARK_CLASSPATH="${SPARK_CLASSPATH:+${SPARK_CLASSPATH}:}${SPARK_HOME}/jars/*"
if [[ -n "${PYSPARK_PYTHON:-}" ]]; then
  export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$PYSPARK_PYTHON}"
fi

case "${1:-}" in
  driver)
    shift
    exec "${TINI[@]}" "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    shift
    # Spark passes executor JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...
    java_opts=()
    while IFS= read -r name; do
      java_opts+=("${!name}")
    done < <(compgen -e | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n)
    exec "${TINI[@]}" "${JAVA_HOME}/bin/java" \
      "${java_opts[@]}" \
      "-Xms${SPARK_EXECUTOR_MEMORY}" \
      "-Xmx${SPARK_EXECUTOR_MEMORY}" \
      -cp "${SPARK_CLASSPATH}${SPARK_DIST_CLASSPATH:+:${SPARK_DIST_CLASSPATH}}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  *)
    exec "$@"
    ;;
esac
