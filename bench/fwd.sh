#!/usr/bin/env bash
# Forwarding benchmark: a three-namespace line A -> B -> C, B forwarding on one core (core 1),
# trafgen in A on core 0 sending 64 B frames (60 + CRC) as fast as it can.
#
#   sudo bash bench/fwd.sh [SECONDS]
#
# Forwarders compared in the same run, each for SECONDS (default 5) after 1 s of warm-up:
#   linerate fwd xdp:vB0 -> xdp:vB1 (copy mode: veth has no zero-copy AF_XDP)
#   linerate fwd afpacket:vB0 -> afpacket:vB1
#   Linux ip_forward, a Linux bridge
#   dpdk-testpmd io-fwd on net_af_xdp and on net_af_packet (no hugepages)
# Every forwarder hands C frames whose destination MAC is not vC's (02:00:00:00:00:01, l2fwd's
# rewrite; testpmd io leaves vB0's), so C drops them early at the same small cost for all.
# pps = rx_packets delta on vC (what came out of B); "in" = rx_packets delta on vB0.
# Then capture on vB0 (no forwarding): linerate count -i xdp:vB0 vs -i afpacket:vB0.
# Prints a Markdown table. Needs root, trafgen (netsniff-ng); testpmd rows need dpdk-testpmd.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
OUT=bench/out
mkdir -p "$OUT"
cargo build --release -q -p linerate-cli
LR=$PWD/target/release/linerate
A=lrfA$$ B=lrfB$$ C=lrfC$$
GEN="" FWD=""
stop_group() {
  if [ -n "$1" ]; then
    kill -INT -- -"$1" 2>/dev/null || true; sleep 0.5
    kill -KILL -- -"$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true
  fi
}
cleanup() {
  stop_group "$FWD"; stop_group "$GEN"
  for n in "$A" "$B" "$C"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
for n in "$A" "$B" "$C"; do ip netns add "$n"; ip -n "$n" link set lo up; done
ip link add vA netns "$A" type veth peer name vB0 netns "$B"
ip link add vB1 netns "$B" type veth peer name vC netns "$C"
for x in "$A:vA" "$B:vB0" "$B:vB1" "$C:vC"; do ip -n "${x%%:*}" link set "${x#*:}" up; done
ip netns exec "$A" ethtool -K vA sg off >/dev/null 2>&1 || true
mac() { ip -n "$1" -o link show "$2" | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2; }
MACA=$(mac "$A" vA) MACB0=$(mac "$B" vB0)
FAKE=02:00:00:00:00:01
cat > "$OUT/fwd64.cfg" <<CFG
{ eth(da=DMAC, sa=SMAC, type=0x0800), ipv4(saddr=198.18.0.1, daddr=198.19.0.2, ttl=64, df), udp(sp=1024, dp=9), fill(0x00, 18) }
CFG
cnt() { ip netns exec "$1" cat "/sys/class/net/$2/statistics/rx_packets"; }

start_gen() { # DMAC
  setsid ip netns exec "$A" taskset -c 0 trafgen --no-sock-mem -Q -C -P 1 -i "$OUT/fwd64.cfg" --cpp \
    -D DMAC="$1" -D SMAC="$MACA" -o vA >"$OUT/trafgen.out" 2>&1 &
  GEN=$!
}

declare -a ROWS
measure() { # name
  sleep 1
  local c0 i0 c1 i1
  c0=$(cnt "$C" vC); i0=$(cnt "$B" vB0)
  sleep "$SECS"
  c1=$(cnt "$C" vC); i1=$(cnt "$B" vB0)
  local pps=$(( (c1 - c0) / SECS )) inp=$(( (i1 - i0) / SECS ))
  ROWS+=("| $1 | $(printf "%'d" "$inp") | $(printf "%'d" "$pps") |")
  echo "$1: in $inp pps, forwarded $pps pps" >&2
}

run_fwd() { # name, DMAC, command in B...
  local name=$1 dmac=$2; shift 2
  setsid ip netns exec "$B" taskset -c 1 "$@" >"$OUT/fwd-$name.out" 2>&1 &
  FWD=$!
  sleep 1
  start_gen "$dmac"
  measure "$name"
  stop_group "$GEN"; GEN=""
  stop_group "$FWD"; FWD=""
  sleep 0.5
}

# 1-2. linerate fwd (l2fwd rewrite: dst 02:00:00:00:00:01)
run_fwd "linerate fwd xdp (copy)" "$MACB0" "$LR" fwd -i xdp:vB0 -o xdp:vB1 --xdp-mode copy -T 0
run_fwd "linerate fwd afpacket" "$MACB0" "$LR" fwd -i afpacket:vB0 -o afpacket:vB1 -T 0

# 3. ip_forward
ip -n "$B" addr add 198.18.0.2/24 dev vB0
ip -n "$B" addr add 198.19.0.1/24 dev vB1
ip -n "$B" neigh replace 198.19.0.2 lladdr "$FAKE" dev vB1 nud permanent
ip netns exec "$B" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.vB0.rp_filter=0
run_fwd "Linux ip_forward" "$MACB0" sleep 3600
ip netns exec "$B" sysctl -qw net.ipv4.ip_forward=0
ip -n "$B" addr flush dev vB0; ip -n "$B" addr flush dev vB1

# 4. bridge (unknown unicast to the fake MAC floods to vB1)
ip -n "$B" link add br0 type bridge
ip -n "$B" link set vB0 master br0; ip -n "$B" link set vB1 master br0; ip -n "$B" link set br0 up
run_fwd "Linux bridge" "$FAKE" sleep 3600
ip -n "$B" link del br0

# 5-6. dpdk-testpmd io-fwd
if command -v dpdk-testpmd >/dev/null; then
  TP="dpdk-testpmd --no-huge --no-pci -m 512 -l 0-1 --no-shconf --file-prefix lrf$$"
  TPA="-- --forward-mode=io --nb-cores=1 --total-num-mbufs=32768 --stats-period 1"
  # shellcheck disable=SC2086
  run_fwd "dpdk-testpmd io net_af_xdp" "$MACB0" $TP \
    --vdev net_af_xdp0,iface=vB0,start_queue=0,queue_count=1 \
    --vdev net_af_xdp1,iface=vB1,start_queue=0,queue_count=1 $TPA
  # testpmd (libbpf xsk) attaches its program through rtnetlink: a killed testpmd leaves it.
  ip -n "$B" link set dev vB0 xdp off 2>/dev/null || true
  ip -n "$B" link set dev vB1 xdp off 2>/dev/null || true
  # shellcheck disable=SC2086
  run_fwd "dpdk-testpmd io net_af_packet" "$MACB0" $TP \
    --vdev net_af_packet0,iface=vB0,qpairs=1,blocksz=4096,framesz=2048,framecnt=4096 \
    --vdev net_af_packet1,iface=vB1,qpairs=1,blocksz=4096,framesz=2048,framecnt=4096 $TPA
else
  ROWS+=("| dpdk-testpmd | not installed | - |")
fi

# 7. capture on vB0 (count only): xdp vs afpacket
declare -a CAP
capture() { # name, port
  setsid ip netns exec "$B" taskset -c 1 "$LR" count -i "$2" -q --json >"$OUT/cap-$1.out" 2>&1 &
  FWD=$!
  sleep 1
  start_gen "$MACB0"
  sleep 1
  local i0 i1; i0=$(cnt "$B" vB0); sleep "$SECS"; i1=$(cnt "$B" vB0)
  stop_group "$GEN"; GEN=""
  stop_group "$FWD"; FWD=""
  local got; got=$(grep '"summary"' "$OUT/cap-$1.out" | grep -o '"pkts":[0-9]*' | head -1 | cut -d: -f2 || true)
  CAP+=("| linerate count -i $2 | $(printf "%'d" $(( (i1 - i0) / SECS ))) | ${got:-?} total |")
}
capture xdp xdp:vB0
capture afpacket afpacket:vB0

echo
echo "Forwarding A -> B -> C, 64 B, B on one core (core 1), trafgen on core 0, ${SECS} s each:"
echo
echo "| forwarder in B | offered to vB0 (pps) | out of B to vC (pps) |"
echo "|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "Capture on vB0 (trafgen source), ${SECS} s + warm-up:"
echo
echo "| tool | offered (pps) | packets counted |"
echo "|---|---|---|"
printf '%s\n' "${CAP[@]}"
