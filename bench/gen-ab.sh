#!/usr/bin/env bash
# Interleaved A/B of `linerate gen --engine xsk` (AF_XDP copy mode) of two builds, with
# dpdk-testpmd txonly net_af_xdp (the goal's peer) in each round, on the same veth pair and the
# same traffic as bench/gen.sh's rows: 64 B frames to a MAC that is not vB's, no program on vB.
# PORT=afpacket: `linerate gen -o afpacket:vA` instead, with trafgen -P 1 as the peer.
#
#   sudo bash bench/gen-ab.sh OLD_BIN NEW_BIN [SECONDS] [ROUNDS]     (defaults 4 s, 5 rounds)
#
# pps = vB rx_packets delta over the window, after WARM (default 2) s of warm-up; prints every
# round and the medians. By hand only.
set -uo pipefail
OLD=$(realpath -e "${1:?usage: bench/gen-ab.sh OLD_BIN NEW_BIN [SECONDS] [ROUNDS]}")
NEW=$(realpath -e "${2:?usage: bench/gen-ab.sh OLD_BIN NEW_BIN [SECONDS] [ROUNDS]}")
[ -n "$OLD" ] && [ -n "$NEW" ] || exit 2
SECS=${3:-4} ROUNDS=${4:-5}
cd "$(dirname "$0")/.."
OUT=bench/out; mkdir -p "$OUT"
A=lrabA$$ B=lrabB$$ PGID=
cleanup() {
  [ -n "$PGID" ] && kill -KILL -- -"$PGID" 2>/dev/null
  ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$A"; ip netns add "$B"
# The same pair as bench/gen.sh: two queues a side (QUEUES=1 for one).
Q=${QUEUES:-2}
ip link add vA netns "$A" numtxqueues "$Q" numrxqueues "$Q" type veth peer name vB netns "$B" \
  numtxqueues "$Q" numrxqueues "$Q"
ip -n "$A" link set vA up; ip -n "$B" link set vB up
ip netns exec "$A" ethtool -K vA sg off >/dev/null 2>&1
MACA=$(ip -n "$A" -o link show vA | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
DMAC=02:00:00:00:00:02
rxpk() { ip netns exec "$B" cat /sys/class/net/vB/statistics/rx_packets; }
run() { # NAME CORES COMMAND...: sets PPS (in this shell, so that cleanup sees PGID)
  local name=$1 cores=$2 r0 r1 t0 t1; shift 2
  setsid ip netns exec "$A" taskset -c "$cores" "$@" >"$OUT/gen-ab-$name.out" 2>&1 &
  PGID=$!
  sleep "${WARM:-2}" # testpmd takes 1-2 s to start sending
  r0=$(rxpk); t0=$(date +%s.%N); sleep "$SECS"; r1=$(rxpk); t1=$(date +%s.%N)
  kill -INT -- -"$PGID" 2>/dev/null; sleep 0.3; kill -KILL -- -"$PGID" 2>/dev/null
  wait "$PGID" 2>/dev/null; PGID=
  ip -n "$A" link set dev vA xdp off 2>/dev/null
  PPS=$(python3 -c "print(round(($r1-$r0)/($t1-$t0)))")
  # A linerate that refused to start counts nothing (vB's own few packets are not its rate).
  if grep -q "^linerate: error" "$OUT/gen-ab-$name.out"; then
    echo "bench/gen-ab.sh: $name failed: $(grep -m1 "^linerate: error" "$OUT/gen-ab-$name.out")" >&2
    PPS=nan
  fi
}
XS=(gen --dst-mac "$DMAC" --src-mac "$MACA" --src-ip 198.18.0.1
    --dst-ip 198.18.0.2 --size 64 --no-probe -t $((SECS + 3)) -q)
if [ "${PORT:-xsk}" = afpacket ]; then
  XS+=(-o afpacket:vA)
  cat >"$OUT/gen-ab-udp64.cfg" <<CFG
{ eth(da=$DMAC, sa=$MACA, type=0x0800), ipv4(saddr=198.18.0.1, daddr=198.18.0.2, ttl=64, df), udp(sp=1024, dp=9), fill(0x00, 18) }
CFG
  PEER=trafgen PEERCORES=0
  TP=(trafgen --no-sock-mem -Q -C -P 1 -i "$OUT/gen-ab-udp64.cfg" -o vA)
else
  # One socket on queue 0, as testpmd's queue_count=1 (xdp:vA alone opens every queue).
  XS+=(-o xdp:vA@0 --engine xsk)
  PEER=testpmd PEERCORES=0-1
  TP=(dpdk-testpmd --no-huge --no-pci -m 512 -l 0-1 --no-shconf --file-prefix lrab$$
      --vdev net_af_xdp0,iface=vA,start_queue=0,queue_count=1 -- --forward-mode=txonly
      --txpkts=60 --eth-peer=0,$DMAC --stats-period 1 --nb-cores=1 --total-num-mbufs=32768)
fi
echo "# gen ${PORT:-xsk} A/B, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg), ${SECS}s x $ROUNDS"
declare -A V
ROWS=(old new peer)
for r in $(seq "$ROUNDS"); do
  # Each round starts one row further on, so no row always follows the same one.
  for k in 0 1 2; do
    row=${ROWS[$(( (k + r - 1) % 3 ))]}
    case $row in
      old) run old 0 "$OLD" "${XS[@]}" ;;
      new) run new 0 "$NEW" "${XS[@]}" ;;
      peer) command -v "${TP[0]}" >/dev/null || continue; run "$PEER" "$PEERCORES" "${TP[@]}" ;;
    esac
    echo "round $r: $row $PPS"
    V[$row]="${V[$row]:-} $PPS"
  done
done
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# shellcheck disable=SC2086
echo "medians (pps): old $(med ${V[old]}), new $(med ${V[new]}), $PEER $(med ${V[peer]:-0})"
