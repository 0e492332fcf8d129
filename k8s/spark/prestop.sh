#!/usr/bin/env bash
# preStop hook of the sink's Spark driver (SparkApplication driver.lifecycle.preStop): drain the
# sink before Kubernetes signals the container.
#
# In the driver pod the processes are tini (PID 1) -> spark-submit's JVM -> the sink's Python
# (/opt/cdcnorm/spark/sink_main.py, started by Spark's PythonRunner). The SIGTERM Kubernetes sends
# reaches PID 1 only, and through tini the JVM, which stops the SparkContext under the Python
# sink: its drain (finish the micro-batch, commit, wait for table maintenance) never runs. So this
# hook sends SIGTERM to the Python sink itself and waits for it to exit; the JVM then ends with
# it. Kubernetes sends its own SIGTERM once the hook returns, or when the pod's grace period
# (terminationGracePeriodSeconds, which the hook's time counts against) runs out.
#
# Env (for tests): CDCNORM_DRAIN_PATTERN (the sink's main file), CDCNORM_DRAIN_TIMEOUT_S,
# CDCNORM_PROC (the proc filesystem), CDCNORM_DRAIN_LOG (where to log: PID 1's stdout, so the
# lines reach `kubectl logs`).
set -uo pipefail
pattern=${CDCNORM_DRAIN_PATTERN:-/opt/cdcnorm/spark/sink_main.py}
timeout=${CDCNORM_DRAIN_TIMEOUT_S:-870}
proc=${CDCNORM_PROC:-/proc}
log=${CDCNORM_DRAIN_LOG:-/proc/1/fd/1}
{ exec >>"$log"; } 2>/dev/null || true
exec 2>&1

say() { echo "cdcnorm prestop: $*"; }

# the Python processes running the sink's main file (not the JVM, whose arguments name it too)
pids=()
for dir in "$proc"/[0-9]*; do
  pid=${dir##*/}
  [[ $pid == "$$" ]] && continue
  args=()
  while IFS= read -r -d '' arg; do args+=("$arg"); done <"$dir/cmdline" 2>/dev/null || continue
  (( ${#args[@]} >= 2 )) || continue
  [[ ${args[0]##*/} == python* ]] || continue
  for arg in "${args[@]:1}"; do
    if [[ $arg == "$pattern" ]]; then
      pids+=("$pid")
      break
    fi
  done
done

if (( ${#pids[@]} == 0 )); then
  say "no sink process ($pattern) runs; nothing to drain"
  exit 0
fi
say "SIGTERM to the sink (pid ${pids[*]}): it finishes its micro-batch and stops; waiting up to ${timeout}s"
kill -TERM "${pids[@]}" 2>/dev/null
deadline=$((SECONDS + timeout))
for pid in "${pids[@]}"; do
  # gone, or a zombie its parent has not reaped yet: either way it has stopped
  while [[ -d $proc/$pid ]] && ! grep -q '^State:[[:space:]]*Z' "$proc/$pid/status" 2>/dev/null; do
    if (( SECONDS >= deadline )); then
      say "the sink (pid $pid) is still running after ${timeout}s; Kubernetes stops the pod at the end of its grace period"
      exit 1
    fi
    sleep 1
  done
done
say "the sink stopped after $((SECONDS))s"
exit 0
