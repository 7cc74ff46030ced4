#!/usr/bin/env bash
# Does `linerate gen --rate R` achieve R? One run of each port at a rate it can reach, with the
# default bounded catch-up and with --no-catch-up, printing the Rate line of each summary and,
# for the veth rows, what vB received.
#
#   sudo bash bench/rate.sh            # as the machine is
#   sudo BUSY=1 bash bench/rate.sh     # with a busy loop on core 1 (started and ended by PID)
#
# Veth rows: gen in namespace A on vA, 64 B frames to a MAC that is not vB's; vB's rx_packets
# before and after; the XDP rows with bpf/xdp_drop.o on vB. By hand, not in CI (timing).
set -uo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p linerate-cli || exit 1
LR=$PWD/target/release/linerate
A=lrrA$$ B=lrrB$$
F=$(mktemp -d)/rate.pcap
BUSYPID=
cleanup() {
  [ -n "$BUSYPID" ] && kill "$BUSYPID" 2>/dev/null
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "$(dirname "$F")"
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add vA netns "$A" type veth peer name vB netns "$B"
ip -n "$A" link set vA up; ip -n "$B" link set vB up
rxpk() { ip netns exec "$B" cat /sys/class/net/vB/statistics/rx_packets; }
gen() { # label, gen flags...
  local label=$1; shift
  echo "### $label: linerate gen $*"
  "$LR" gen -q "$@" | grep -E "^Rate|^  (the|--on-stall)"
}
veth() { # label, gen flags...
  local label=$1 r0 r1; shift
  r0=$(rxpk)
  echo "### $label: linerate gen $*"
  ip netns exec "$A" "$LR" gen -q --dst-mac 02:00:00:00:00:02 "$@" | grep -E "^Rate|^  (the|--on-stall)"
  sleep 0.3
  r1=$(rxpk)
  echo "vB received: $((r1 - r0))"
}
if [ "${BUSY:-0}" = 1 ]; then
  taskset -c 1 bash -c 'while :; do :; done' &
  BUSYPID=$!
  echo "busy loop on core 1: PID $BUSYPID"
fi
uptime
gen "pcap" -o "pcap:$F" --rate 100kpps -c 200k
gen "pcap, shift" -o "pcap:$F" --rate 100kpps -c 200k --no-catch-up
gen "mem" -o mem:rate --rate 1Mpps -t 3s
gen "mem, shift" -o mem:rate --rate 1Mpps -t 3s --no-catch-up
gen "mem, 2 threads" -o mem:rate1,mem:rate2 --threads 2 --rate 1Mpps -t 3s
veth "afpacket" -o afpacket:vA --rate 50kpps -t 3s
veth "afpacket, shift" -o afpacket:vA --rate 50kpps -t 3s --no-catch-up
veth "afpacket 200k" -o afpacket:vA --rate 200kpps -t 3s
veth "afpacket 200k, 2 threads" -o afpacket:vA --rate 200kpps -t 3s --threads 2
ip -n "$B" link set dev vB xdpdrv obj bpf/xdp_drop.o sec xdp || exit 1
veth "xdp xsk" -o xdp:vA --engine xsk --rate 200kpps -t 3s
veth "xdp live" -o xdp:vA --engine live --rate 1Mpps -t 3s
