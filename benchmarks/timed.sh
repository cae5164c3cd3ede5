# Sourced by the benchmark scripts, after they set $out:
# timed NAME COMMAND... runs it, logs to $out/NAME.log and appends its wall time to
# $out/times.txt.
timed() {
  local name=$1 start
  shift
  start=$(date +%s)
  "$@" > "$out/$name.log" 2>&1
  echo "$name $(( $(date +%s) - start )) s" | tee -a "$out/times.txt"
}
