#!/usr/bin/env bash
# Generation benchmark of `linerate gen` against trafgen, tcpreplay --topspeed, dpdk-testpmd
# txonly (net_af_packet, net_af_xdp) and xdp-trafficgen (XDP live frames), in one run, plus raw
# generation into a pcap writer on /dev/null and the departure precision table at 100 kpps and
# 1 Mpps there. (A mem port has no reader in another process: it fills its ring after 4,096
# packets and counts the rest as ring_full, which these tables printed before.)
#
#   sudo bash bench/gen.sh [SECONDS]
#   sudo XDP_TRAFFICGEN=/path/to/xdp-trafficgen bash bench/gen.sh [SECONDS]
#
# The XDP rows (linerate gen live, xdp-trafficgen) send through XDP redirects, which a veth
# takes only when its peer has an XDP program: for those rows vB runs bpf/xdp_drop.o (XDP_DROP,
# attached with `ip link set dev vB xdpdrv obj bpf/xdp_drop.o sec xdp`), and pps = vB
# rx_packets delta (XDP frames count there). The other rows run with vB as is, as before.
# xdp-trafficgen comes from xdp-tools 1.6.3 (not in this repository): in its source tree,
# `FORCE_SYSTEM_LIBBPF=1 CLANG=clang-14 LLC=llc-14 ./configure; make -C lib; make -C
# xdp-trafficgen` (needs m4 and bpftool); the script uses $XDP_TRAFFICGEN, else
# /opt/linerate-peers/xdp-tools-1.6.3/xdp-trafficgen/xdp-trafficgen if it exists.
#
# Veth between namespaces A and B, `ethtool -K vA sg off`, 64 B frames (60 + CRC) to a MAC that
# is not vB's (dropped early by vB: this measures the sender). Each sender runs in A, pinned to
# core 0 (1 core) or cores 0-1 (2 cores), for SECONDS (default 6); pps = vB rx_packets delta
# over the run. Tools that are not installed are skipped. Prints a Markdown table (PEERS.md has
# the reference figures). Runs by hand, not in CI.
#
# The two goal pairs of the AF_PACKET and AF_XDP copy-mode senders (linerate gen afpacket: vs
# trafgen -P 1, linerate gen xsk vs testpmd txonly af_xdp) swing by 5 % from one run to the next
# on this machine, as much as the gap the goal measures: each pair runs ROUNDS (default 5)
# interleaved rounds of GOAL_SECS (default 2) s each (odd rounds linerate first, even rounds the
# peer first), and its rows and the goals show the medians, with the spread of the rounds (pps
# min-max and the ratio of each round) beside them. Every other row is one run of SECS seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-6}
ROUNDS=${ROUNDS:-5}
GOAL_SECS=${GOAL_SECS:-2}
OUT=bench/out
mkdir -p "$OUT"
cargo build --release -q -p linerate-cli || exit 1
LR=$PWD/target/release/linerate
A=lrgA$$ B=lrgB$$
PGID=
cleanup() {
  [ -n "$PGID" ] && kill -INT -- -"$PGID" 2>/dev/null
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
# Two queues a side (QUEUES=1 for the old single-queue pair): a veth hands an XDP frame sent
# from CPU n to receive queue n % queues, each queue with its own NAPI. With one queue the two
# threads of the --threads 2 / -t 2 rows feed one receive ring whose NAPI runs on one of the
# two sending cores: that row then measures vB's single queue, not the senders (linerate's
# threads reported 2.7-3.2 M device drops per 3 s run there, its frames the full ring refused).
# One-core rows send from CPU 0 into queue 0 either way.
Q=${QUEUES:-2}
ip link add vA netns "$A" numtxqueues "$Q" numrxqueues "$Q" type veth peer name vB netns "$B" \
  numtxqueues "$Q" numrxqueues "$Q"
ip -n "$A" link set vA up; ip -n "$B" link set vB up
ip -n "$A" link set lo up; ip -n "$B" link set lo up
ip -n "$A" addr add 198.18.0.1/24 dev vA; ip -n "$B" addr add 198.18.0.2/24 dev vB
ip netns exec "$A" ethtool -K vA sg off >/dev/null 2>&1
MACA=$(ip -n "$A" -o link show vA | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
DMAC=02:00:00:00:00:02
cat > "$OUT/udp64.cfg" <<CFG
{ eth(da=DMAC, sa=SMAC, type=0x0800), ipv4(saddr=198.18.0.1, daddr=198.18.0.2, ttl=64, df), udp(sp=1024, dp=9), fill(0x00, 18) }
CFG
rxpk() { ip netns exec "$B" cat /sys/class/net/vB/statistics/rx_packets; }

declare -A R V SPREAD
ORDER=()
# run NAME CORES COMMAND...: runs the sender in A for WIN (default SECS) seconds after WARM
# (default 1) s, records vB's rx pps in R[NAME] and appends it to V[NAME] (the rounds).
run() {
  local name=$1 cores=$2; shift 2
  local r0 r1 t0 t1
  setsid ip netns exec "$A" taskset -c "$cores" "$@" >"$OUT/gen-$name.out" 2>&1 &
  PGID=$!
  sleep "${WARM:-1}"
  r0=$(rxpk); t0=$(date +%s.%N)
  sleep "${WIN:-$SECS}"
  r1=$(rxpk); t1=$(date +%s.%N)
  kill -INT -- -"$PGID" 2>/dev/null; sleep 0.3; kill -KILL -- -"$PGID" 2>/dev/null
  wait "$PGID" 2>/dev/null; PGID=
  R[$name]=$(python3 -c "print(round(($r1-$r0)/($t1-$t0)))")
  [ -n "${V[$name]:-}" ] || ORDER+=("$name")
  V[$name]="${V[$name]:-} ${R[$name]}"
  echo "  $name: ${R[$name]} pps" >&2
}
# rounds NAME_A FN_A NAME_B FN_B: ROUNDS interleaved rounds of two senders (FN_x runs one, for
# GOAL_SECS s), odd rounds A first; then R[NAME] is the median of its rounds, SPREAD[NAME] its
# min-max, and SPREAD[NAME_A/NAME_B] the ratio of each round (min-max and all of them).
rounds() {
  local a=$1 fa=$2 b=$3 fb=$4 r
  for r in $(seq "$ROUNDS"); do
    if ((r % 2)); then WIN=$GOAL_SECS $fa; WIN=$GOAL_SECS $fb; else WIN=$GOAL_SECS $fb; WIN=$GOAL_SECS $fa; fi
  done
  for n in "$a" "$b"; do
    [ -n "${V[$n]:-}" ] || continue
    read -r "R[$n]" "SPREAD[$n]" < <(python3 -c "import statistics as s; v=sorted(map(int,'${V[$n]}'.split())); print(round(s.median(v)), f'{v[0]:,}-{v[-1]:,}')")
  done
  [ -n "${V[$a]:-}" ] && [ -n "${V[$b]:-}" ] || return 0
  SPREAD[$a/$b]=$(python3 -c "
a=list(map(int,'${V[$a]}'.split())); b=list(map(int,'${V[$b]}'.split()))
q=[x/max(1,y) for x,y in zip(a,b)]
print(f'ratio per round {min(q):.3f}-{max(q):.3f}× (' + ', '.join(f'{x:.3f}' for x in q) + ')')")
}

LRARGS=(gen -o afpacket:vA --dst-mac "$DMAC" --src-mac "$MACA" --src-ip 198.18.0.1
        --dst-ip 198.18.0.2 --size 64 --no-probe -q)
TGARGS=(--no-sock-mem -Q -C -i "$OUT/udp64.cfg" --cpp -D DMAC="$DMAC" -D SMAC="$MACA" -o vA)
lr1() { run "linerate gen (1 core)" 0 "$LR" "${LRARGS[@]}" -t $((GOAL_SECS + 3)); }
tg1() { command -v trafgen >/dev/null && run "trafgen -P 1" 0 trafgen -P 1 "${TGARGS[@]}"; }
rounds "linerate gen (1 core)" lr1 "trafgen -P 1" tg1
run "linerate gen --threads 2" 0-1 "$LR" "${LRARGS[@]}" -t $((SECS + 3)) --threads 2
if command -v trafgen >/dev/null; then
  run "trafgen -P 2" 0-1 trafgen --no-sock-mem -Q -C -P 2 -i "$OUT/udp64.cfg" --cpp \
    -D DMAC="$DMAC" -D SMAC="$MACA" -o vA
fi
if command -v tcpreplay >/dev/null; then
  "$LR" gen -o "$OUT/udp64.pcap" --dst-mac "$DMAC" --src-mac "$MACA" -c 100k --size 64 \
    --no-probe -q >/dev/null
  run "tcpreplay --topspeed" 0 tcpreplay --topspeed --loop 0 -q -i vA "$OUT/udp64.pcap"
fi
if command -v dpdk-testpmd >/dev/null; then
  TP=(dpdk-testpmd --no-huge --no-pci -m 512 -l 0-1 --no-shconf --file-prefix lrg$$)
  TPA=(-- --forward-mode=txonly --txpkts=60 --eth-peer=0,$DMAC --stats-period 1 --nb-cores=1
       --total-num-mbufs=32768)
  run "testpmd txonly af_packet" 0-1 "${TP[@]}" \
    --vdev net_af_packet0,iface=vA,qpairs=1,blocksz=4096,framesz=2048,framecnt=4096 "${TPA[@]}"
fi
# The AF_XDP copy-mode sender in the same conditions as testpmd's af_xdp row (it sends by
# sendto, not by XDP redirect, and needs no program on vB; with XDP_DROP on vB the receiving
# veth would copy each frame into a page for XDP, work testpmd's row does not pay), on one
# socket on queue 0 as testpmd's queue_count=1 (xdp:vA alone opens every queue). vA loses the
# program testpmd's af_xdp port may have left before each run; testpmd takes 1-2 s to start
# sending (WARM=2 for it).
tpx() {
  command -v dpdk-testpmd >/dev/null || return 0
  ip -n "$A" link set dev vA xdp off 2>/dev/null
  WARM=2 run "testpmd txonly af_xdp" 0-1 "${TP[@]}" \
    --vdev net_af_xdp0,iface=vA,start_queue=0,queue_count=1 "${TPA[@]}"
  ip -n "$A" link set dev vA xdp off 2>/dev/null
}
lrx() {
  run "linerate gen xsk (1 core)" 0 "$LR" gen -o xdp:vA@0 --engine xsk --dst-mac "$DMAC" \
    --src-mac "$MACA" --src-ip 198.18.0.1 --dst-ip 198.18.0.2 --size 64 --no-probe \
    -t $((GOAL_SECS + 3)) -q
  ip -n "$A" link set dev vA xdp off 2>/dev/null
}
ip -n "$A" link set dev vA xdp off 2>/dev/null
rounds "linerate gen xsk (1 core)" lrx "testpmd txonly af_xdp" tpx

# XDP rows: XDP_DROP on vB; vA without the program testpmd's af_xdp port may have left.
ip -n "$A" link set dev vA xdp off 2>/dev/null
ip -n "$B" link set dev vB xdpdrv obj bpf/xdp_drop.o sec xdp || exit 1
MACB=$(ip -n "$B" -o link show vB | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
LIVE=(gen -o xdp:vA --dst-mac "$MACB" --src-mac "$MACA" --src-ip 198.18.0.1 --dst-ip 198.18.0.2
      --size 64 --no-probe -t $((SECS + 3)) -q)
run "linerate gen live (1 core)" 0 "$LR" "${LIVE[@]}"
run "linerate gen live --threads 2" 0-1 "$LR" "${LIVE[@]}" --threads 2
run "linerate gen live 66 B IPv6 (1 core)" 0 "$LR" gen -o xdp:vA --dst-mac "$MACB" \
  --src-mac "$MACA" --src-ip 2001:db8::1 --dst-ip 2001:db8::2 --size 66 --no-probe \
  -t $((SECS + 3)) -q
# Peers built by bench/peers.sh (a path in the environment wins).
[ -f bench/out/peers.env ] && . bench/out/peers.env
TG=${XDP_TRAFFICGEN:-/opt/linerate-peers/xdp-tools-1.6.3/xdp-trafficgen/xdp-trafficgen}
if [ -x "$TG" ]; then
  # xdp-trafficgen pins its threads to cores 0..N-1 itself; 66 B IPv6/UDP frames.
  run "xdp-trafficgen udp (1 thread)" 0 "$TG" udp -m "$MACB" -I 2 vA
  run "xdp-trafficgen udp -t 2" 0-1 "$TG" udp -m "$MACB" -I 2 -t 2 vA
else
  echo "xdp-trafficgen not found (set XDP_TRAFFICGEN=/path): build it from xdp-tools 1.6.3 with" >&2
  echo "  FORCE_SYSTEM_LIBBPF=1 CLANG=clang-14 LLC=llc-14 ./configure; make -C lib; make -C xdp-trafficgen" >&2
  echo "  (needs m4 and bpftool)" >&2
fi
# The two one-core XDP senders again with vB's receive work in a NAPI thread on core 1, as on a
# real link where the receiver is another machine: this measures the sender alone (above, veth
# does the receiver's work on the sending core).
if ip netns exec "$B" sh -c 'echo 1 > /sys/class/net/vB/threaded' 2>/dev/null; then
  while read -r pid comm; do
    case "$comm" in "napi/vB-"*) taskset -pc 1 "$pid" >/dev/null ;; esac
  done < <(ps -eo pid=,comm=)
  run "linerate gen live (1 core), receiver on core 1" 0 "$LR" "${LIVE[@]}"
  [ -x "$TG" ] && run "xdp-trafficgen udp (1 thread), receiver on core 1" 0 "$TG" udp -m "$MACB" -I 2 vA
  ip netns exec "$B" sh -c 'echo 0 > /sys/class/net/vB/threaded'
else
  echo "vB cannot run threaded NAPI here: rows with the receiver on core 1 skipped" >&2
fi
ip -n "$B" link set dev vB xdpdrv off

echo
echo "## Generation on veth, 64 B frames, ${SECS} s each; the two goal pairs ${ROUNDS} interleaved rounds of ${GOAL_SECS} s (pps received by vB)"
echo
echo "| sender | cores | pps | vs linerate (1 core) |"
echo "|---|---|---|---|"
base=${R["linerate gen (1 core)"]}
. bench/lib.sh
# The send path's goals as the performance issue restated them: on veth the kernel's AF_PACKET and
# copy-mode AF_XDP send take ~90 % of the sender's core, so the ceiling is the peer's own rate.
# The two interleaved pairs: medians, the ratio of each round beside.
goal "gen afpacket:, 1 core (median of $ROUNDS, interleaved; ${SPREAD["linerate gen (1 core)/trafgen -P 1"]:-})" "${R["linerate gen (1 core)"]:-}" "trafgen -P 1" "${R["trafgen -P 1"]:-}" 0.98 pps
goal "gen xdp: --engine xsk, 1 core (median of $ROUNDS, interleaved; ${SPREAD["linerate gen xsk (1 core)/testpmd txonly af_xdp"]:-})" "${R["linerate gen xsk (1 core)"]:-}" "testpmd txonly af_xdp" "${R["testpmd txonly af_xdp"]:-}" 1.0 pps
goal "gen xdp: live engine, 1 core" "${R["linerate gen live (1 core)"]:-}" "xdp-trafficgen udp (1 thread)" "${R["xdp-trafficgen udp (1 thread)"]:-}" 1.2 pps
goal "gen xdp: live engine, 2 threads" "${R["linerate gen live --threads 2"]:-}" "xdp-trafficgen udp -t 2" "${R["xdp-trafficgen udp -t 2"]:-}" 1.0 pps
for n in "${ORDER[@]}"; do
  cores=1; case $n in *"-P 2"*|*"threads 2"*|*"-t 2"*) cores=2;; esac
  case $n in testpmd*) cores="1 fwd + 1 main";; esac
  label=$n
  [ -n "${SPREAD[$n]:-}" ] && label="$n (median of $ROUNDS × ${GOAL_SECS} s, interleaved; ${SPREAD[$n]})"
  python3 -c "print(f'| {\"$label\"} | $cores | {${R[$n]}:,} | {${R[$n]}/max(1,$base):.2f}× |')"
done
for p in "linerate gen (1 core)/trafgen -P 1" "linerate gen xsk (1 core)/testpmd txonly af_xdp"; do
  [ -n "${SPREAD[$p]:-}" ] && echo && echo "$p: ${SPREAD[$p]}"
done

echo
echo "## Raw generation into a pcap writer on /dev/null (1 core)"
echo
echo '```'
taskset -c 1 "$LR" gen -o /dev/null -c 20M --no-probe -q
taskset -c 1 "$LR" gen -o /dev/null -c 20M -q
taskset -c 1 "$LR" gen -o /dev/null -c 5M --size imix -q
echo '```'
echo
echo "## Departure precision into a pcap writer on /dev/null (CBR, 64 B, 1 core, SCHED_FIFO)"
for r in 100kpps 1Mpps; do
  echo
  echo "### $r"
  echo '```'
  chrt -f 10 taskset -c 1 "$LR" gen -o /dev/null --rate $r -c $((SECS * 100))k -q | sed -n "/^Sent/,\$p"
  echo '```'
done
