#!/usr/bin/env bash
# Interleaved A/B of gen's template path of two builds: `linerate gen -o /dev/null` (a pcap
# writer on /dev/null) on core 1, base then new in each round; prints every round's pps (from the
# summary line). Two runs: plain 64 B UDP without probes, and a size range with varied fields.
#
#   bash bench/gen-templates-ab.sh OLD_BIN NEW_BIN [ROUNDS]     (default 5 rounds)
#
# By hand only; read the medians, and the machine's load beside them.
set -u
A=$(realpath -e "${1:?usage: bench/gen-templates-ab.sh OLD_BIN NEW_BIN [ROUNDS]}") || exit 2
B=$(realpath -e "${2:?usage: bench/gen-templates-ab.sh OLD_BIN NEW_BIN [ROUNDS]}") || exit 2
ROUNDS=${3:-5}
run() { taskset -c 1 "$1" gen -o /dev/null "${@:2}" -q 2>&1 | grep -o "[0-9']* pps" | head -1 | tr -d "' pps"; }
uptime
for name in plain varied; do
  case $name in
    plain) ARGS=(-c 20M --no-probe) ;;
    varied) ARGS=(-c 5M --size 64-1518 --src-ip 10.0.0.1-10.0.255.255 --dport 1-1000) ;;
  esac
  echo "## $name: gen -o /dev/null ${ARGS[*]} -q"
  for r in $(seq 1 "$ROUNDS"); do
    a=$(run "$A" "${ARGS[@]}"); b=$(run "$B" "${ARGS[@]}")
    echo "round $r: base $a new $b"
  done
done
uptime
