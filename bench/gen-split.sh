#!/usr/bin/env bash
# Where a sender's core time goes, per packet: user and system time (perf stat's rusage) of
# `linerate gen -c COUNT` of two builds, interleaved, on the same veth pair and traffic as
# bench/gen-ab.sh (64 B frames to a MAC that is not vB's, sg off, no program on vB), pinned to
# core 0. Time is counted per process, so a loaded machine stretches the wall clock, not the
# ns per packet (the kernel's softirq work done on the sender's core may be counted apart).
# PORT=xsk: `-o xdp:vA@0 --engine xsk` instead of `-o afpacket:vA`. PEER=1: the goal's peer in
# each round too (afpacket: `trafgen --no-sock-mem -Q -C -P 1 -n COUNT`, the same frames; xsk:
# none), split the same way.
#
#   sudo bash bench/gen-split.sh OLD_BIN NEW_BIN [COUNT] [ROUNDS]   (defaults 2000000, 5)
#
# Prints each run's user and system ns per packet and the medians. By hand only.
set -uo pipefail
OLD=$(realpath -e "${1:?usage: bench/gen-split.sh OLD_BIN NEW_BIN [COUNT] [ROUNDS]}") || exit 2
NEW=$(realpath -e "${2:?usage: bench/gen-split.sh OLD_BIN NEW_BIN [COUNT] [ROUNDS]}") || exit 2
N=${3:-2000000} ROUNDS=${4:-5}
cd "$(dirname "$0")/.."
OUT=bench/out; mkdir -p "$OUT"
A=lrspA$$ B=lrspB$$
cleanup() { ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null; }
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$A"; ip netns add "$B"
ip link add vA netns "$A" type veth peer name vB netns "$B"
ip -n "$A" link set vA up; ip -n "$B" link set vB up
ip netns exec "$A" ethtool -K vA sg off >/dev/null 2>&1
MACA=$(ip -n "$A" -o link show vA | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
ARGS=(gen --dst-mac 02:00:00:00:00:02 --src-mac "$MACA" --src-ip 198.18.0.1
      --dst-ip 198.18.0.2 --size 64 --no-probe -c "$N" -q)
if [ "${PORT:-afpacket}" = xsk ]; then ARGS+=(-o xdp:vA@0 --engine xsk); else ARGS+=(-o afpacket:vA); fi
ROWS=(old new)
if [ -n "${PEER:-}" ] && [ "${PORT:-afpacket}" = afpacket ] && command -v trafgen >/dev/null; then
  ROWS+=(trafgen)
  cat >"$OUT/gen-split-udp64.cfg" <<CFG
{ eth(da=02:00:00:00:00:02, sa=$MACA, type=0x0800), ipv4(saddr=198.18.0.1, daddr=198.18.0.2, ttl=64, df), udp(sp=1024, dp=9), fill(0x00, 18) }
CFG
fi
echo "# gen ${PORT:-afpacket} user/sys split, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg), $N packets x $ROUNDS"
declare -A U S
for r in $(seq "$ROUNDS"); do
  # Each round starts one row further on, so no row always follows the same one.
  for k in $(seq 0 $((${#ROWS[@]} - 1))); do
    row=${ROWS[$(( (k + r) % ${#ROWS[@]} ))]}
    case $row in
      old) CMD=("$OLD" "${ARGS[@]}") ;;
      new) CMD=("$NEW" "${ARGS[@]}") ;;
      trafgen) CMD=(trafgen --no-sock-mem -Q -C -P 1 -i "$OUT/gen-split-udp64.cfg" -o vA -n "$N") ;;
    esac
    ip netns exec "$A" perf stat -e task-clock -o "$OUT/gen-split-$row.txt" \
      taskset -c 0 "${CMD[@]}" >/dev/null 2>&1
    ip -n "$A" link set dev vA xdp off 2>/dev/null
    u=$(awk '/seconds user/ {print $1}' "$OUT/gen-split-$row.txt")
    s=$(awk '/seconds sys/ {print $1}' "$OUT/gen-split-$row.txt")
    nu=$(python3 -c "print(round($u*1e9/$N,1))"); ns=$(python3 -c "print(round($s*1e9/$N,1))")
    U[$row]+="$nu "; S[$row]+="$ns "
    echo "round $r: $row user $nu ns/pkt, sys $ns ns/pkt"
  done
done
med() { python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(f'{statistics.median(v)} (min {min(v)}, max {max(v)})')" $1; }
echo "medians: old user $(med "${U[old]}"), sys $(med "${S[old]}")"
echo "medians: new user $(med "${U[new]}"), sys $(med "${S[new]}")"
[ -n "${U[trafgen]:-}" ] && echo "medians: trafgen user $(med "${U[trafgen]}"), sys $(med "${S[trafgen]}")"
