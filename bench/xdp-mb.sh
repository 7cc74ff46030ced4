#!/usr/bin/env bash
# bench/xdp-mb.sh OLD NEW [ROUNDS]: AF_XDP multi-buffer, on a veth pair between two network
# namespaces, interleaved round by round (OLD, NEW, OLD, NEW, ...), medians. The 64 B rows at
# MTU 1500 (at MTU 9000 OLD attaches generic XDP, and veth drops the live frames sent to a
# peer without native XDP), the jumbo rows at MTU 9000:
#  - rx64:   `count -i xdp:vB -t 4` of OLD and of NEW while NEW's `gen -o xdp:vA --size 64`
#            (XDP live frames) sends in A: packets per second counted;
#  - tx64:   `gen -o xdp:vA --engine xsk --size 64 -t 3` of OLD and of NEW: packets per second
#            sent (the xsk engine's send path);
#  - jumbo:  NEW's `count -i xdp:vB` and `count -i afpacket:vB` while `gen -o afpacket:vA
#            --size 9018 -t 3` sends 9 014-byte frames: Gbit/s counted (OLD cannot carry them);
#            with --xdp-frame-size 2048 and 4096.
# Sender on core 0, receiver on core 1. Needs root. By hand, never in CI.
#
#   sudo bash bench/xdp-mb.sh /tmp/lr-main/linerate target/release/linerate 5
set -uo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-5}
NA=lrmbA$$ NB=lrmbB$$
cleanup() { ip netns del $NA 2>/dev/null; ip netns del $NB 2>/dev/null; }
trap cleanup EXIT
ip netns add $NA && ip netns add $NB
ip link add vA netns $NA type veth peer name vB netns $NB
for n in A B; do ip -n lrmb$n$$ link set v$n mtu 9000 up; done
ip netns exec $NB sysctl -q net.ipv6.conf.all.disable_ipv6=1
ip netns exec $NA sysctl -q net.ipv6.conf.all.disable_ipv6=1
json() { grep '"type":"summary"' | head -1; }
field() { python3 -c "import json,sys; j=json.loads(sys.stdin.read() or '{}'); print(j.get('$1', 0))"; }
rx() { # BIN PORT [FLAGS...] -> pps mbps of the count while the sender runs
  local bin=$1 port=$2
  shift 2
  ip netns exec $NB taskset -c 1 "$bin" count -i "$port" "$@" -t 4 --json -q >/tmp/lrmb-rx.$$ 2>&1 &
  local pid=$!
  sleep 1.5
  ip netns exec $NA taskset -c 0 "$NEW" gen -o "$SENDER" --size "$SIZE" -t 3 >/dev/null 2>&1
  wait $pid
  local s
  s=$(json </tmp/lrmb-rx.$$)
  echo "$(echo "$s" | field pps) $(echo "$s" | field mbps)"
}
tx() { # BIN -> pps sent
  local out
  out=$(ip netns exec $NA taskset -c 0 "$1" gen -o xdp:vA --engine xsk --size 64 -t 3 --json 2>&1 | json)
  echo "$out" | field pps
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
declare -A R
mtu() { for n in A B; do ip -n lrmb$n$$ link set v$n mtu "$1"; done; }
for r in $(seq "$ROUNDS"); do
  mtu 1500
  SENDER=xdp:vA SIZE=64
  for v in OLD NEW; do
    bin=${!v}
    R[rx64-$v]+="$(rx "$bin" xdp:vB | cut -d' ' -f1) "
    R[tx64-$v]+="$(tx "$bin") "
  done
  mtu 9000
  SENDER=afpacket:vA SIZE=9018
  for p in "xdp:vB --xdp-frame-size 2048" "xdp:vB --xdp-frame-size 4096" "afpacket:vB"; do
    # shellcheck disable=SC2086
    R[jumbo-$p]+="$(rx "$NEW" $p | cut -d' ' -f2) "
  done
done
printf '| row | runs | median |\n|---|---|---|\n'
for k in rx64-OLD rx64-NEW tx64-OLD tx64-NEW; do
  printf '| %s (pps) | %s | **%s** |\n' "$k" "${R[$k]}" "$(echo "${R[$k]}" | tr ' ' '\n' | grep . | median)"
done
for p in "xdp:vB --xdp-frame-size 2048" "xdp:vB --xdp-frame-size 4096" "afpacket:vB"; do
  printf '| jumbo 9014 B, count -i %s (Mbit/s) | %s | **%s** |\n' "$p" "${R[jumbo-$p]}" \
    "$(echo "${R[jumbo-$p]}" | tr ' ' '\n' | grep . | median)"
done
rm -f /tmp/lrmb-rx.$$
