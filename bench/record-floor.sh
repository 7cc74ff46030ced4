#!/usr/bin/env bash
# bench/record-floor.sh: what a live capture's CPU per packet is made of, on bench/record.sh's
# capture step (same veth pair, `linerate gen` in A on core 0, the program under test in B on
# core 1): just receive (`linerate count -q`), receive + pcap write (`count -w FILE`),
# `linerate record` (and `record-b`: the record of another build, LRB, for an A/B in the same
# run), and stenotype with its threads apart (writer vs index). By hand, as root, never in CI.
#
#   sudo bash bench/record-floor.sh
#   env: SECS (4), RATE (300k), SIZE (64), WHAT ("count count-w record stenotype";
#        record-b too with LRB),
#        LR (linerate binary; default target/release/linerate; it sends too), LRB (record-b's
#        binary), REPS (1: rounds, interleaved),
#        PERF=1: also `perf record -g` on core 1 and core 0 during the step of each program,
#        top symbols (where the kernel's receive work runs: the sender's core or the receiver's).
#
# CPU = on-CPU time of the process (each thread, /proc/PID/task/*/schedstat) over the step,
# divided by the packets offered (vB's rx + tx over the step); "taken" = packets in the files
# (capinfos), stenotype's "Stored N" lines, count's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench/record-floor.sh: needs root" >&2; exit 2; }
SECS=${SECS:-4} RATE=${RATE:-300k} SIZE=${SIZE:-64} REPS=${REPS:-1}
WHAT=${WHAT:-count count-w record stenotype}
LR=${LR:-$PWD/target/release/linerate}
W=$(mktemp -d "${DIR:-/var/tmp}/linerate-floor.XXXXXX")
chmod 755 "$W"
A=lrfA$$ B=lrfB$$
PGIDS=()
cleanup() {
  local g
  for g in "${PGIDS[@]}"; do kill -KILL -- -"$g" 2>/dev/null || true; done
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
  rm -rf -- "$W"
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add vA netns "$A" type veth peer name vB netns "$B"
ip -n "$A" link set vA up; ip -n "$B" link set vB up
ip -n "$A" link set lo up; ip -n "$B" link set lo up
ip -n "$A" addr add 198.18.0.1/24 dev vA; ip -n "$B" addr add 198.18.0.2/24 dev vB
ip netns exec "$A" ethtool -K vA sg off >/dev/null 2>&1 || true
MACB=$(ip -n "$B" -o link show vB | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
rxpk() { ip netns exec "$B" sh -c 'echo $(( $(cat /sys/class/net/vB/statistics/rx_packets) + $(cat /sys/class/net/vB/statistics/tx_packets) ))'; }
# per-thread CPU ns: "comm ns" lines
threads() { for t in /proc/"$1"/task/*; do printf '%s:%s %s\n' "$(tr ' ' _ <"$t/comm")" "${t##*/}" "$(cut -d' ' -f1 "$t/schedstat")"; done 2>/dev/null; }

echo "## bench/record-floor.sh ($(date -u +%Y-%m-%dT%H%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $LR)"
echo
echo "$SIZE B at ${RATE}pps for $SECS s per step; CPU ns per offered packet, by thread"
echo
echo "| what | offered | taken | CPU ns/pkt | threads (ns/pkt) |"
echo "|---|---|---|---|---|"
for rep in $(seq 1 "$REPS"); do
for what in $WHAT; do
  d=$W/$what; rm -rf "$d"; mkdir -p "$d"
  [ -n "${PERF:-}" ] && [ "$REPS" -gt 1 ] && { echo "PERF=1 wants REPS=1" >&2; exit 2; }
  case $what in
    count) setsid ip netns exec "$B" taskset -c 1 "$LR" count -i afpacket:vB -q >"$d.log" 2>&1 & ;;
    count-w) setsid ip netns exec "$B" taskset -c 1 "$LR" count -i afpacket:vB -q -w "$d/f.pcap" >"$d.log" 2>&1 & ;;
    record) setsid ip netns exec "$B" taskset -c 1 "$LR" record -i afpacket:vB --file-size 100MB "$d" -q >"$d.log" 2>&1 & ;;
    record-b) setsid ip netns exec "$B" taskset -c 1 "$LRB" record -i afpacket:vB --file-size 100MB "$d" -q >"$d.log" 2>&1 & ;;
    stenotype)
      mkdir -p "$d/PKT0" "$d/IDX0"; chown -R stenographer:stenographer "$d"
      setsid ip netns exec "$B" taskset -c 1 stenotype --iface=vB --dir="$d/" --threads=1 --seccomp=none \
        --blocks=64 --aiops=32 --blockage_sec=1 --fileage_sec=60 --uid=stenographer --gid=stenographer -v -v >"$d.log" 2>&1 & ;;
  esac
  pid=$!; PGIDS+=("$pid")
  sleep 2
  r0=$(rxpk); threads "$pid" >"$d.t0"
  if [ -n "${PERF:-}" ]; then
    perf record -q -g -C 1 -o "$d.perf1" -- sleep "$SECS" >/dev/null 2>&1 &
    p1=$!
    perf record -q -g -C 0 -o "$d.perf0" -- sleep "$SECS" >/dev/null 2>&1 &
    p0=$!
    perf record -q -F 20000 -p "$pid" -o "$d.perfp" -- sleep "$SECS" >/dev/null 2>&1 &
    pp=$!
  fi
  ip netns exec "$A" taskset -c 0 "$LR" gen -o afpacket:vA --size "$SIZE" --rate "${RATE}pps" -t "${SECS}s" \
    --dst-mac "$MACB" --src-ip 198.18.0.1 --dst-ip 198.18.0.2 -q >/dev/null 2>&1
  [ -n "${PERF:-}" ] && wait "$p1" "$p0" "$pp"
  sleep 2
  r1=$(rxpk); threads "$pid" >"$d.t1"
  kill -INT "$pid" 2>/dev/null || true
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; [ "$what" = stenotype ] && grep -q 'Stored [0-9]* with' "$d.log" && break; sleep 0.1; done
  kill -KILL -- -"$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  off=$((r1 - r0))
  case $what in
    count) taken=$(grep -o "Summary: [0-9']*" "$d.log" | grep -o "[0-9']*" | tr -d "'" | head -1 || true) ;;
    stenotype) taken=$(awk '/Stored [0-9]+ with/{for(i=1;i<=NF;i++) if($i=="Stored") s+=$(i+1)} END{print s+0}' "$d.log") ;;
    *) taken=$(find "$d" -name '*.pcap' -type f -print0 | xargs -0 -r capinfos -T -r -c 2>/dev/null | awk -F'\t' '{s+=$2} END{print s+0}') ;;
  esac
  split=$(join <(sort "$d.t0") <(sort "$d.t1") | awk -v n="$off" '{d=$3-$2; t+=d; if (d>0) s=s sprintf("%s %.1f; ", $1, d/n)} END{printf "%.1f|%s", t/n, s}')
  echo "| $what | $off | ${taken:-?} | ${split%%|*} | ${split#*|} |"
  if [ -n "${PERF:-}" ]; then
    for c in 1 0; do
      echo
      echo "perf, core $c, $what (self %, top 25):"
      echo '```'
      perf report -i "$d.perf$c" --no-children -g none --sort comm --stdio -q 2>/dev/null | grep '%' | head -8 || true
      echo "(top symbols of the capture, the generator and the kernel threads; other helpers' builds left out)"
      perf report -i "$d.perf$c" --no-children -g none --sort comm,dso,sym --stdio -q 2>/dev/null | grep '%' |
        grep -E ' (linerate|stenotype|ksoftirqd/[01]|swapper|kworker[^ ]*) ' | head -25 || true
      echo '```'
    done
  fi
  if [ -n "${PERF:-}" ]; then
    echo
    echo "perf -p (the program alone, every thread, self %, top 30):"
    echo '```'
    perf report -i "$d.perfp" --no-children --sort comm,dso,sym --stdio -q 2>/dev/null | grep '%' | head -30 || true
    echo '```'
  fi
  rm -rf "$d" "$d".perf*
done
done
echo
echo "(load at the end $(cut -d' ' -f1-3 /proc/loadavg))"
