#!/usr/bin/env bash
# "Argus on a ZC cluster", redone: the highest rate each flow monitor keeps without loss.
#
#   sudo bash bench/argus.sh [SECONDS] [RATES...]
#
# Rows (each on the same traffic, one after another):
#   argus-afpacket   plain `argus -i vB` (its own libpcap on the veth)
#   argus-cluster-N  `linerate balance -i afpacket:vB -c ID -n N -m ip` and N argus processes,
#                    `argus -i cluster:ID@Q`, through liblinerate_pcap.so (LD_PRELOAD)
#   linerate-flows   `linerate flows -i afpacket:vB`
# Traffic: `linerate gen` in namespace A sends 64 B UDP frames in FLOWS flows (default 1000) to
# vB's MAC (namespace B, no route for the destination: dropped after the taps) at each RATE
# (default 50k 100k 200k 400k 800k 1600k pps), `-c RATE*SECONDS` packets (default 5 s). Offered =
# vB's rx_packets delta; kept = packets in argus' flow records (`racount`, management records
# left out) or in `flows`' summary, each tool filtering `udp` (and IPv6 off in both namespaces). A step is lossless when kept = offered. The generator runs on
# core 0, the tool under test on core 1 (argus-cluster: the master on 1, the argus processes on
# every core: there are two). Prints one Markdown table with every step, then per row the rate up
# to which every step was lossless and the highest lossless step (a loaded machine makes single
# steps lose: run it more than once), for BENCHMARKS.md.
#
# Environment: LR (a linerate binary; default: build target/release/linerate), QUEUES (N,
# default 2), FLOWS, LIB (default target/release/liblinerate_pcap.so: the
# cluster row is skipped with a message when it is missing), ROWS (default all three:
# "argus-afpacket argus-cluster linerate-flows"). Needs root, argus (argus-server) and racount
# (argus-client). The machine may be loaded by other work: say so next to the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
shift || true
RATES=("$@")
[ ${#RATES[@]} -gt 0 ] || RATES=(50k 100k 200k 400k 800k 1600k)
QUEUES=${QUEUES:-2}
FLOWS=${FLOWS:-1000}
ROWS=${ROWS:-argus-afpacket argus-cluster linerate-flows}
OUT=bench/out/argus
mkdir -p "$OUT"
if [ -z "${LR:-}" ]; then
  cargo build --release -q -p linerate-cli
  LR=$PWD/target/release/linerate
fi
LIB=${LIB:-$PWD/target/release/liblinerate_pcap.so}
for t in argus racount; do
  command -v "$t" >/dev/null || { echo "$t is missing (apt-get install argus-server argus-client)" >&2; exit 1; }
done
A=lrargA$$ B=lrargB$$
ID=$((7000 + $$ % 1000))
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
# No IPv6: its neighbour discovery would add packets nobody sent on purpose.
for n in "$A" "$B"; do ip netns exec "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1; done
ip link add vA netns "$A" type veth peer name vB netns "$B"
ip -n "$A" link set vA up; ip -n "$B" link set vB up
ip -n "$A" link set lo up; ip -n "$B" link set lo up
ip -n "$A" addr add 198.18.0.1/24 dev vA; ip -n "$B" addr add 198.18.0.2/24 dev vB
ip netns exec "$A" ethtool -K vA sg off >/dev/null 2>&1 || true
MACB=$(ip -n "$B" -o link show vB | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)

rxpk() { ip netns exec "$B" cat /sys/class/net/vB/statistics/rx_packets; }
pps_of() { # 50k -> 50000
  awk -v r="$1" 'BEGIN { m = 1; if (r ~ /[kK]$/) m = 1e3; if (r ~ /[mM]$/) m = 1e6; sub(/[kKmM]$/, "", r); printf "%d", r * m }'
}
# Sends RATE for SECS; echoes the packets vB received meanwhile.
offer() {
  local pps=$1 r0 r1
  r0=$(rxpk)
  ip netns exec "$A" taskset -c 0 "$LR" gen -o afpacket:vA --rate "${pps}pps" -c $((pps * SECS)) \
    --size 64 --dst-mac "$MACB" --src-ip 198.18.1.1 --dst-ip 198.19.0.1 --flows "$FLOWS" -q \
    >"$OUT/gen.out" 2>&1 || true
  sleep 1
  r1=$(rxpk)
  echo $((r1 - r0))
}
# Starts a process in B (setsid: its own group), records its pid.
start_b() { # core, log, command...
  local core=$1 log=$2; shift 2
  if [ "$core" = any ]; then
    setsid ip netns exec "$B" "$@" >"$log" 2>&1 &
  else
    setsid ip netns exec "$B" taskset -c "$core" "$@" >"$log" 2>&1 &
  fi
  PIDS+=($!)
  echo $!
}
stop() { # pids...: SIGINT, then wait (SIGKILL after 20 s)
  local p
  for p in "$@"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "$@"; do
    for _ in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
}
argus_pkts() { # files... -> packets in flow records
  local f n sum=0
  for f in "$@"; do
    n=$(racount -r "$f" - not man 2>/dev/null | awk '$1 == "sum" { print $3 }')
    sum=$((sum + ${n:-0}))
  done
  echo "$sum"
}

declare -A BEST UPTO LOST
lines=()
step() { # row, rate, offered, kept, note
  local loss lossless
  loss=$(($3 - $4))
  lossless=no
  if [ "$loss" -le 0 ]; then
    lossless=yes
    BEST[$1]=$2
    [ -n "${LOST[$1]:-}" ] || UPTO[$1]=$2
  else
    LOST[$1]=1
  fi
  lines+=("| $1 | $2 | $3 | $4 | $loss | $lossless | $5 |")
  echo "$1 $2: offered $3, kept $4 ($5)" >&2
}

for row in $ROWS; do
  if [ "$row" = argus-cluster ] && [ ! -f "$LIB" ]; then
    echo "argus-cluster: $LIB is missing (cargo build --release builds liblinerate_pcap.so): skipped" >&2
    continue
  fi
  BEST[$row]=none
  UPTO[$row]=none
  for rate in "${RATES[@]}"; do
    pps=$(pps_of "$rate")
    rm -f "$OUT"/*.argus
    case $row in
      argus-afpacket)
        p=$(start_b 1 "$OUT/argus.log" argus -i vB -w "$OUT/plain.argus" udp)
        sleep 2
        offered=$(offer "$pps")
        stop "$p"
        kept=$(argus_pkts "$OUT/plain.argus")
        note="argus -i vB"
        ;;
      argus-cluster)
        m=$(start_b 1 "$OUT/balance.log" "$LR" balance -i afpacket:vB -c "$ID" -n "$QUEUES" -m ip --wait-consumers -q)
        for _ in $(seq 100); do [ -e "/dev/shm/linerate-cluster-$ID" ] && break; sleep 0.1; done
        ps=()
        for ((q = 0; q < QUEUES; q++)); do
          ps+=("$(start_b any "$OUT/argus-q$q.log" env LD_PRELOAD="$LIB" argus -i "cluster:$ID@$q" -w "$OUT/q$q.argus" udp)")
        done
        sleep 2
        offered=$(offer "$pps")
        # The master first: the queues end as a savefile ends, each argus writes its last records.
        stop "$m"
        stop "${ps[@]}"
        files=()
        for ((q = 0; q < QUEUES; q++)); do files+=("$OUT/q$q.argus"); done
        kept=$(argus_pkts "${files[@]}")
        note="$QUEUES queues, -m ip; $(grep -o 'Distributed[^;]*' "$OUT/balance.log" | head -1 || true)"
        ;;
      linerate-flows)
        p=$(start_b 1 "$OUT/flows.json" "$LR" flows -i afpacket:vB -f udp -w /dev/null --json)
        sleep 2
        offered=$(offer "$pps")
        stop "$p"
        kept=$(python3 -c 'import json,sys
j = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
print(j["packets"])' "$OUT/flows.json")
        note="linerate flows -i afpacket:vB"
        ;;
      *) echo "unknown row $row" >&2; exit 2 ;;
    esac
    step "$row" "$rate" "$offered" "$kept" "$note"
  done
done

echo
echo "Argus on a cluster vs argus on the interface vs linerate flows: 64 B UDP, $FLOWS flows, ${SECS} s per step ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "| row | rate | offered (vB rx) | kept | lost | lossless | note |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${lines[@]}"
echo
echo "| row | lossless up to (every step up to it) | highest lossless step |"
echo "|---|---|---|"
for row in $ROWS; do
  [ -n "${BEST[$row]:-}" ] && echo "| $row | ${UPTO[$row]:-none} pps | ${BEST[$row]} pps |"
done
