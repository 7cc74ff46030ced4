# bench/lib.sh: sourced by the bench scripts. `goal WORK LINERATE PEER PEER_FIGURE GOAL [UNIT]`
# records one row of the goals table that bench/all.sh prints: linerate's figure and its peer's,
# measured in the same run (higher is better; GOAL is the ratio linerate/peer asked for, or "-").
# It appends to $BENCH_GOALS when bench/all.sh set it, and prints nothing otherwise, so the
# scripts run alone as before.
goal() {
  [ -n "${BENCH_GOALS:-}" ] || return 0
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "${2:-nan}" "$3" "${4:-nan}" "$5" "${6:-}" >>"$BENCH_GOALS"
}
