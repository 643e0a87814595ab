#!/bin/bash
# The entry point of Spark's Kubernetes pods, for the Spark base made here (the official
# Spark image has its own /opt/entrypoint.sh; PyPI's pyspark does not carry one). Spark's
# Kubernetes resource manager starts its pods with this image's entry point and:
#   driver <spark-submit arguments>   the driver pod (cluster mode): spark-submit in client
#                                     mode inside the pod, bound to the pod's address;
#   executor                          an executor pod: the executor backend, configured by
#                                     the SPARK_* environment Spark sets on the pod.
# Anything else runs as given (`headwater enricher run` in local mode, the tests).
# tini is PID 1: it forwards SIGTERM and reaps the orphans of Python workers.
set -euo pipefail

SPARK_CLASSPATH="${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}${SPARK_HOME}/jars/*"
if [[ -n ${SPARK_CONF_DIR:-} ]]; then
  SPARK_CLASSPATH="$SPARK_CONF_DIR:$SPARK_CLASSPATH"
fi
run=(/usr/bin/tini -s --)

case "${1:-}" in
  driver)
    shift
    exec "${run[@]}" "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    # Spark passes the executor's JVM options as SPARK_JAVA_OPT_0, _1, ... in order.
    java_opts=()
    while IFS= read -r name; do
      java_opts+=("${!name}")
    done < <(compgen -e | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n)
    exec "${run[@]}" "${JAVA_HOME:+$JAVA_HOME/bin/}java" "${java_opts[@]}" \
      -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "$SPARK_CLASSPATH${SPARK_DIST_CLASSPATH:+:$SPARK_DIST_CLASSPATH}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \
      --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  *)
    exec "${run[@]}" "$@"
    ;;
esac
