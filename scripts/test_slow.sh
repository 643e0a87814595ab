#!/usr/bin/env bash
# `make test-slow`: the whole suite on a machine made about twice as slow on purpose, and
# launched the way background jobs and CI runners launch it. Green here means no test
# depends on the machine's speed or on how it was started (issue 41).
#
# - Twice as slow: one CPU hog per core, pinned to it (taskset) at the suite's own
#   priority, so every core is shared half and half. The hogs are bounded: killed when
#   this script ends, however it ends, and after HEADWATER_SLOW_MAX_SECONDS at the latest.
# - Hostile launch: SIGINT and SIGHUP ignored (inherited, as `nohup cmd &` leaves them),
#   a session of its own with no controlling terminal (setsid), stdin from /dev/null.
#
# `make test-slow ARGS=...` hands ARGS to the inner `make test` (a sub-make inherits it with
# its quoting); HEADWATER_SLOW_HOGS_PER_CORE (default 1) makes it slower.
set -euo pipefail
cd "$(dirname "$0")/.."

hogs_per_core=${HEADWATER_SLOW_HOGS_PER_CORE:-1}
max_seconds=${HEADWATER_SLOW_MAX_SECONDS:-9000}  # above .ci/run's 90 minutes
hogs=()
stop_hogs() {
  # timeout leads a process group of its own: the group goes, the spinning bash with it.
  for pid in "${hogs[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_hogs EXIT

for ((core = 0; core < $(nproc); core++)); do
  for ((i = 0; i < hogs_per_core; i++)); do
    timeout --signal=KILL "$max_seconds" taskset -c "$core" bash -c 'while :; do :; done' &
    hogs+=($!)
  done
done
echo "test-slow: ${#hogs[@]} CPU hogs on $(nproc) cores; the suite starts with SIGINT and SIGHUP ignored, no terminal"

started=$(date +%s)
status=0
(
  trap '' INT HUP
  exec setsid --wait make test </dev/null
) || status=$?
echo "test-slow: make test exited $status after $((($(date +%s) - started) / 60)) min"
exit "$status"
