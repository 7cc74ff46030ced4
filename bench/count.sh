#!/usr/bin/env bash
# Capture and pcap-read benchmarks of `linerate count` against tcpdump and netsniff-ng, in one run.
#
#   sudo bash bench/count.sh [SECONDS] [PACKETS]
#
# 1. Live capture on veth: trafgen (core 0, namespace A) sends 64 B frames as fast as it can to vB
#    (namespace B); each capture tool in turn runs on core 1 in B for SECONDS (default 8). For each:
#    packets captured, kernel drops, CPU time per captured packet (utime+stime of the process).
# 2. pcap read: a PACKETS-packet file (default 5 M) read by `tcpdump -r F -w /dev/null` and by
#    `linerate count -i F -w /dev/null` (and without -w); wall time and packets per second.
# Prints a Markdown table for BENCHMARKS.md. Needs root, trafgen (netsniff-ng), tcpdump.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-8}
PKTS=${2:-5000000}
OUT=bench/out
mkdir -p "$OUT"
cargo build --release -q -p linerate-cli
LR=$PWD/target/release/linerate
A=lrbA$$ B=lrbB$$
cleanup() {
  [ -n "${GEN:-}" ] && kill -INT -- -"$GEN" 2>/dev/null || true
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add vA netns "$A" type veth peer name vB netns "$B"
ip -n "$A" link set vA up; ip -n "$B" link set vB up
ip -n "$A" link set lo up; ip -n "$B" link set lo up
ip -n "$A" addr add 198.18.0.1/24 dev vA; ip -n "$B" addr add 198.18.0.2/24 dev vB
ip netns exec "$A" ethtool -K vA sg off >/dev/null 2>&1 || true
MACB=$(ip -n "$B" -o link show vB | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
MACA=$(ip -n "$A" -o link show vA | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
cat > "$OUT/udp64.cfg" <<CFG
{ eth(da=DMAC, sa=SMAC, type=0x0800), ipv4(saddr=198.18.0.1, daddr=198.18.0.2, ttl=64, df), udp(sp=1024, dp=9), fill(0x00, 18) }
CFG

rxpk() { ip netns exec "$B" cat /sys/class/net/vB/statistics/rx_packets; }
cpu_of() { awk '{print $14+$15}' "/proc/$1/stat"; }   # clock ticks

# Start the generator once; it runs for all capture tools.
setsid ip netns exec "$A" taskset -c 0 trafgen --no-sock-mem -Q -C -P 1 -i "$OUT/udp64.cfg" --cpp \
  -D DMAC="$MACB" -D SMAC="$MACA" -o vA >/dev/null 2>&1 &
GEN=$!
sleep 2

declare -A R
run_capture() { # name, command...
  local name=$1; shift
  local r0; r0=$(rxpk)
  setsid ip netns exec "$B" taskset -c 1 "$@" >"$OUT/$name.out" 2>&1 &
  local pid=$!
  sleep 1
  # the real capture process is the last exec'd child: ip netns exec execs the command, taskset too
  local t0; t0=$(cpu_of "$pid")
  sleep "$SECS"
  local t1; t1=$(cpu_of "$pid")
  kill -INT "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  local r1; r1=$(rxpk)
  R[$name]="$(( (r1 - r0) / (SECS + 1) )) $t0 $t1"
}
run_capture tcpdump tcpdump -i vB -n -w /dev/null -B 262144
run_capture netsniff-ng netsniff-ng -i vB -o /dev/null -s -Q -S 256MiB
run_capture linerate "$LR" count -i afpacket:vB -q --json
kill -INT -- -"$GEN" 2>/dev/null || true; GEN=

HZ=$(getconf CLK_TCK)
echo
echo "## Live capture on veth, 64 B frames, trafgen on core 0, capture on core 1, ${SECS} s each"
echo
echo "| tool | offered pps (vB rx) | captured | kernel drops | CPU ns/pkt | vs tcpdump |"
echo "|---|---|---|---|---|---|"
parse() { # name -> "captured drops"
  case $1 in
    tcpdump) awk '/packets captured/{c=$1} /dropped by kernel/{d=$1} END{print c+0, d+0}' "$OUT/tcpdump.out";;
    netsniff-ng) tr -d '\r' <"$OUT/netsniff-ng.out" | awk '/packets passed filter/{p=$1} /packets failed filter/{f=$1} END{print p+0, f+0}';;
    linerate) python3 -c 'import json,sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        j=json.loads(l)
        if j["type"]=="summary": print(j["pkts"], j["drops_by_reason"]["kernel"])' "$OUT/linerate.out";;
  esac
}
base=
for t in tcpdump netsniff-ng linerate; do
  read -r offered t0 t1 <<<"${R[$t]}"
  read -r cap drops <<<"$(parse $t)"
  nspp=$(python3 -c "print(round(($t1-$t0)/$HZ*1e9/max(1,$cap*$SECS/($SECS+1)),1))")
  [ -z "$base" ] && base=$nspp
  ratio=$(python3 -c "print(round($nspp/$base,2))")
  echo "| $t | $offered | $cap | $drops | $nspp | ${ratio}× |"
done

echo
echo "## pcap read, $PKTS packets of 64 B, best of 3"
F=$OUT/read-$PKTS.pcap
[ -f "$F" ] || python3 bench/mkpcap.py "$F" "$PKTS"
cat "$F" >/dev/null
# best of 3 runs (the file is in the page cache)
t() {
  local best=999 s e d
  for _ in 1 2 3; do
    s=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s.%N)
    d=$(python3 -c "print(f'{$e-$s:.3f}')")
    best=$(python3 -c "print(min($best, $d))")
  done
  echo "$best"
}
td=$(t tcpdump -r "$F" -w /dev/null)
lw=$(t "$LR" count -i "$F" -q -w /dev/null)
lc=$(t "$LR" count -i "$F" -q)
echo
echo "| tool | seconds | Mpps | vs tcpdump |"
echo "|---|---|---|---|"
. bench/lib.sh
goal "pcap read + write, $PKTS packets" "$(python3 -c "print($PKTS/$lw)")" "tcpdump -r F -w /dev/null" "$(python3 -c "print($PKTS/$td)")" 3 pps
for row in "tcpdump -r F -w /dev/null:$td" "linerate count -i F -w /dev/null:$lw" "linerate count -i F:$lc"; do
  name=${row%%:*}; s=${row##*:}
  python3 -c "print(f'| \`$name\` | $s | {$PKTS/$s/1e6:.2f} | {$td/$s:.2f}× |')"
done
