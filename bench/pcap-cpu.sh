#!/usr/bin/env bash
# bench/pcap-cpu.sh: CPU per packet of tcpdump through liblinerate_pcap.so against tcpdump on
# the interface (plain libpcap on AF_PACKET), at the same offered load. A veth pair vA (netns A)
# / vB (netns B); `linerate gen -o afpacket:vA` sends 64 B UDP frames at a fixed rate, a bounded
# count, pinned to core 0; in netns B, pinned to core 1, either
#   (a) `tcpdump -i vB -w /dev/null`
#   (b) `linerate balance -i afpacket:vB -c ID -n 1 --wait-consumers` (the master) and
#       `LD_PRELOAD=liblinerate_pcap.so tcpdump -i cluster:ID@0 -w /dev/null`.
# CPU = utime+stime from /proc/PID/stat, delta from before the first packet to after the last
# (the tools are idle around it); per packet = that / tcpdump's "packets captured". For (b) both
# tcpdump alone and tcpdump + master are shown: the master is part of the cost. Lost = sent -
# captured. Rounds interleave (a) and (b); medians. The primary figure is tcpdump's ns/pkt from
# schedstat (run time in ns, not 1/100 s ticks), printed with its spread (the lowest and highest
# round); more packets a round (SECONDS, or a higher rate) make each round's figure finer: at
# 500k, 5 s is 2.5 M packets and ~150 ms of CPU. By hand, never in CI; needs root.
#
#   sudo bash bench/pcap-cpu.sh [RATES] [SECONDS] [RUNS]   # default "200k 500k", 5 s, 5 rounds
#   LR=/path/linerate LIB=/path/liblinerate_pcap.so bash bench/pcap-cpu.sh ...   # no build
#   OLD_LR=/old/linerate OLD_LIB=/old/liblinerate_pcap.so ... bash bench/pcap-cpu.sh ...
#     A/B: (o), (b) with the old build's master and library, joins each round (interleaved)
#   SLOTS=32768 [OLD_SLOTS=4096] bash bench/pcap-cpu.sh ...   # balance --slots for (b) [and (o)]
#     (default: balance's own, 4096; OLD_SLOTS defaults to SLOTS)
#   HUGE=1 bash bench/pcap-cpu.sh ...   # the run in a private mount namespace with a hugetlbfs
#     mounted in a temporary directory and HUGE_PAGES (default 160) more 2 MiB pages in
#     /proc/sys/vm/nr_hugepages, put back at exit: a build that knows huge pages puts the segment
#     there (its summary line "Segment: ..." is shown); other processes on the machine do not see
#     the mount. HUGE=0 (default): as the machine is (no hugetlbfs here).
#   PERF=DIR bash bench/pcap-cpu.sh ...   # also `perf record -g` tcpdump over each round's
#     sending, (a) included, to DIR/MODE-RATE-RUN.data (then: perf report -i FILE --no-children); the figures of
#     such a run include perf's own cost, not to be compared with a run without it
#   CALLGRIND=DIR bash bench/pcap-cpu.sh "50k" S 1   # tcpdump under `valgrind --tool=callgrind`
#     (with -Z root, so that it writes DIR/MODE-RATE-RUN.cg as it exits), longer pauses around
#     the sending: instructions a packet, which the machine's load does not move (no PMU needed)
#     = the difference of two runs' totals (`callgrind_annotate`) over the difference of their
#     packets, e.g. S = 1 and 3 in two DIRs (tcpdump's start and end cancel out); at 50k pps
#     tcpdump under callgrind keeps up. Its times and CPU figures mean nothing.
# "sleeps" = tcpdump's voluntary context switches over the sending (/proc/PID/status): its waits.
# "master" = the master's own summary of the round (balance -q): received, delivered to the
# queue, and what it dropped with the reason, so that a loss before tcpdump is seen where it was.
set -uo pipefail
if [ "${HUGE:-0}" = 1 ] && [ -z "${LR_HUGE_NS:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "bench/pcap-cpu.sh: HUGE=1 needs root" >&2; exit 2; }
  OLD_NR=$(cat /proc/sys/vm/nr_hugepages)
  echo $((OLD_NR + ${HUGE_PAGES:-160})) >/proc/sys/vm/nr_hugepages
  LR_HUGE_NS=1 unshare -m --propagation private bash "$0" "$@"
  rc=$?
  echo "$OLD_NR" >/proc/sys/vm/nr_hugepages
  exit $rc
fi
HUGEDIR=
if [ -n "${LR_HUGE_NS:-}" ]; then
  HUGEDIR=$(mktemp -d /tmp/linerate-pcap-cpu-huge.XXXXXX)
  mount -t hugetlbfs nodev "$HUGEDIR" || exit 1
fi
cd "$(dirname "$0")/.."
RATES=${1:-200k 500k}
SECS=${2:-5}
RUNS=${3:-5}
if [ -z "${LR:-}" ] || [ -z "${LIB:-}" ]; then
  cargo build --release -q -p linerate-cli -p linerate-pcap || exit 1
  LR=$PWD/target/release/linerate
  LIB=$PWD/target/release/liblinerate_pcap.so
fi
command -v tcpdump >/dev/null || { echo "bench/pcap-cpu.sh: tcpdump is not installed" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench/pcap-cpu.sh: needs root (netns, veth)" >&2; exit 2; }
A=lrcA$$ B=lrcB$$
ID=$((430000 + $$ % 10000))
TMP=$(mktemp -d /tmp/linerate-pcap-cpu.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf -- "$TMP"
  if [ -n "$HUGEDIR" ]; then umount "$HUGEDIR" && rmdir "$HUGEDIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$A" && ip netns add "$B" || exit 1
ip link add vA netns "$A" type veth peer name vB netns "$B" || exit 1
# no IPv6 on the pair: its router and multicast listener messages would be captured too
ip netns exec "$A" sysctl -qw net.ipv6.conf.vA.disable_ipv6=1
ip netns exec "$B" sysctl -qw net.ipv6.conf.vB.disable_ipv6=1
ip -n "$A" link set vA up; ip -n "$B" link set vB up
ip -n "$A" link set lo up; ip -n "$B" link set lo up
MACA=$(ip -n "$A" -o link show vA | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
MACB=$(ip -n "$B" -o link show vB | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
HZ=$(getconf CLK_TCK)

ticks() { # utime+stime of PID, in clock ticks (fields 14, 15; after the ")" of comm)
  sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}
sleeps() { # voluntary context switches of every thread of PID
  cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ {s += $2} END {printf "%d", s}'
}
cpuns() { # run time of every thread of PID, in ns (/proc/PID/task/*/schedstat, first field)
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d", s}'
}
rxpk() { ip netns exec "$B" cat /sys/class/net/vB/statistics/rx_packets; }
waitfor() { # FILE PATTERN: up to 10 s
  for _ in $(seq 1000); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.01
  done
  return 1
}
# gen RATE COUNT: in A, core 0, waits for it
gen() {
  ip netns exec "$A" taskset -c 0 "$LR" gen -o afpacket:vA --dst-mac "$MACB" --src-mac "$MACA" \
    --src-ip 198.18.0.1 --dst-ip 198.18.0.2 --size 64 --no-probe --rate "${1}pps" -c "$2" -q \
    >"$TMP/gen.out" 2>&1
}

# one MODE RATE COUNT: writes "captured lost kernel_dropped tcpdump_ticks master_ticks
# tcpdump_ns master_ns arrived_at_vB"
one() {
  local mode=$1 rate=$2 count=$3 t m=0 t0 t1 m0=0 m1=0 got drop s0 s1 n0 n1=0 r0 r1
  local lr=$LR lib=$LIB slots=${SLOTS:-} v0 v1 wrap=() zroot=() settle=0.5 drain=1.5
  if [ -n "${CALLGRIND:-}" ]; then
    mkdir -p "$CALLGRIND"
    wrap=(valgrind -q --tool=callgrind "--callgrind-out-file=$CALLGRIND/$mode-$rate-${ROUND:-0}.cg")
    zroot=(-Z root)
    settle=3
    drain=3
  fi
  [ "$mode" = o ] && { lr=$OLD_LR; lib=$OLD_LIB; slots=${OLD_SLOTS:-${SLOTS:-}}; }
  rm -f "$TMP/err" "$TMP/master.out"
  if [ "$mode" != a ]; then
    ip netns exec "$B" taskset -c 1 "$lr" balance -i afpacket:vB -c "$ID" -n 1 --wait-consumers \
      ${slots:+--slots "$slots"} -q >"$TMP/master.out" 2>&1 &
    m=$!
    PIDS+=("$m")
    for _ in $(seq 1000); do
      [ -e "/dev/shm/linerate-cluster-$ID" ] && break
      [ -n "$HUGEDIR" ] && [ -e "$HUGEDIR/linerate-cluster-$ID" ] && break
      sleep 0.01
    done
    ip netns exec "$B" taskset -c 1 env LD_PRELOAD="$lib" "${wrap[@]}" tcpdump \
      -i "cluster:$ID@0" "${zroot[@]}" -w /dev/null 2>"$TMP/err" &
  else
    ip netns exec "$B" taskset -c 1 "${wrap[@]}" tcpdump -i vB "${zroot[@]}" -w /dev/null \
      2>"$TMP/err" &
  fi
  t=$!
  PIDS+=("$t")
  waitfor "$TMP/err" "listening on" || { echo "tcpdump did not start: $(cat "$TMP/err")" >&2; }
  sleep "$settle" # the master sees its consumer, tcpdump is in its loop
  r0=$(rxpk)
  t0=$(ticks "$t"); s0=$(cpuns "$t"); v0=$(sleeps "$t")
  [ "$m" != 0 ] && { m0=$(ticks "$m"); n0=$(cpuns "$m"); }
  local perfp=0
  if [ -n "${PERF:-}" ]; then
    mkdir -p "$PERF"
    perf record -q -g -F 1999 -p "$t" -o "$PERF/$mode-$rate-${ROUND:-0}.data" >/dev/null 2>&1 &
    perfp=$!
    sleep 0.2
  fi
  gen "$rate" "$count"
  if [ "$perfp" != 0 ]; then kill -INT "$perfp"; wait "$perfp" 2>/dev/null; fi
  # the last packets through the ring(s): libpcap hands tcpdump a TPACKET_V3 block when it is
  # full or after tcpdump's 1000 ms timeout, so a shorter wait counts the last block as lost
  sleep "$drain"
  t1=$(ticks "$t"); s1=$(cpuns "$t"); v1=$(sleeps "$t")
  [ "$m" != 0 ] && { m1=$(ticks "$m"); n1=$(($(cpuns "$m") - n0)); }
  r1=$(rxpk)
  kill -INT "$t"
  wait "$t" 2>/dev/null
  if [ "$m" != 0 ]; then
    kill -INT "$m"
    wait "$m" 2>/dev/null
  fi
  PIDS=()
  got=$(sed -n 's/^\([0-9]*\) packets captured.*/\1/p' "$TMP/err")
  drop=$(sed -n 's/^\([0-9]*\) packets dropped by kernel.*/\1/p' "$TMP/err")
  echo "${got:-0} $((count - ${got:-0})) ${drop:-0} $((t1 - t0)) $((m1 - m0)) $((s1 - s0)) $n1 $((r1 - r0)) $((v1 - v0))" >"$TMP/res"
  # The master's own account: "rx N = ...; destinations N = delivered D + ring_full R + ..."
  if [ "$m" != 0 ]; then
    tr -d "'" <"$TMP/master.out" | awk '/^Accounting:/ {
        for (i = 2; i < NF; i++) if ($(i + 1) ~ /^[0-9]+$/) v[$i] = $(i + 1)
        s = "rx " v["rx"] ", delivered " v["delivered"]
        n = split("filtered ring_full consumer_gone no_frame unread", k, " ")
        for (j = 1; j <= n; j++) if (v[k[j]] + 0 > 0) s = s ", " k[j] " " v[k[j]]
        print s }' >"$TMP/macct"
    grep -h '^Input drops' "$TMP/master.out" | sed 's/^Input drops (before the master): /; input drops /' >>"$TMP/macct"
    sed -n 's/^Segment: //p' "$TMP/master.out" >"$TMP/mseg.$mode"
  else
    echo "-" >"$TMP/macct"
  fi
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
spread() { sort -g | awk 'NR == 1 {lo = $1} {hi = $1} END {print lo "-" hi}'; }
ns() { # TICKS PACKETS: ns per packet
  awk -v t="$1" -v p="$2" -v hz="$HZ" 'BEGIN {printf "%.0f", (p > 0 ? t / hz * 1e9 / p : 0)}'
}
num() { # 200k, 1M -> number
  awk -v s="$1" 'BEGIN {m = 1; if (s ~ /[kK]$/) m = 1e3; if (s ~ /[mM]$/) m = 1e6;
    sub(/[kKmM]$/, "", s); printf "%d", s * m}'
}

echo "## bench/pcap-cpu.sh \"$RATES\" $SECS $RUNS, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "gen: \`taskset -c 0 linerate gen -o afpacket:vA --size 64 --no-probe --rate RATEpps -c RATE*$SECS\` (netns A);"
echo "(a) \`taskset -c 1 tcpdump -i vB -w /dev/null\`;"
echo "(b) \`taskset -c 1 linerate balance -i afpacket:vB -c ID -n 1 --wait-consumers${SLOTS:+ --slots $SLOTS}\` +"
[ -n "${OLD_LR:-}" ] && echo "(o) the same with the old build${OLD_SLOTS:+, --slots $OLD_SLOTS};"
echo "\`taskset -c 1 env LD_PRELOAD=liblinerate_pcap.so tcpdump -i cluster:ID@0 -w /dev/null\` (netns B)."
echo "CPU = utime+stime (/proc/PID/stat, 1/$HZ s ticks) over the sending; ns/pkt = CPU / tcpdump's packets captured."
for rate in $RATES; do
  R=$(num "$rate")
  COUNT=$((R * SECS))
  echo
  echo "### $rate pps, $COUNT packets"
  echo
  echo "| run | mode | arrived at vB | captured | lost | kernel drop | tcpdump ticks | master ticks | tcpdump ns/pkt | +master ns/pkt | tcpdump ns/pkt (schedstat) | +master ns/pkt (schedstat) | tcpdump sleeps | master |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for f in a bt bm as bts bms al bl ot om ots oms ol; do : >"$TMP/$f"; done
  for r in $(seq "$RUNS"); do
    if [ -n "${OLD_LR:-}" ]; then
      case $((r % 3)) in 1) order="a b o" ;; 2) order="o a b" ;; *) order="b o a" ;; esac
    elif [ $((r % 2)) = 1 ]; then order="a b"; else order="b a"; fi
    for mode in $order; do
      ROUND=$r one "$mode" "$rate" "$COUNT"
      read -r g l d tt mt ts ms rx v <"$TMP/res"
      macct=$(tr '\n' ' ' <"$TMP/macct")
      t=$(ns "$tt" "$g"); tm=$(ns $((tt + mt)) "$g")
      st=$(awk -v n="$ts" -v p="$g" 'BEGIN {printf "%.0f", (p > 0 ? n / p : 0)}')
      sm=$(awk -v n=$((ts + ms)) -v p="$g" 'BEGIN {printf "%.0f", (p > 0 ? n / p : 0)}')
      if [ "$mode" = a ]; then
        echo "$t" >>"$TMP/a"; echo "$st" >>"$TMP/as"; echo "$l" >>"$TMP/al"
        echo "| $r | (a) tcpdump -i vB | $rx | $g | $l | $d | $tt | - | $t | - | $st | - | $v | $macct |"
      elif [ "$mode" = o ]; then
        echo "$t" >>"$TMP/ot"; echo "$tm" >>"$TMP/om"; echo "$st" >>"$TMP/ots"
        echo "$sm" >>"$TMP/oms"; echo "$l" >>"$TMP/ol"
        echo "| $r | (o) old build: balance + tcpdump -i cluster | $rx | $g | $l | $d | $tt | $mt | $t | $tm | $st | $sm | $v | $macct |"
      else
        echo "$t" >>"$TMP/bt"; echo "$tm" >>"$TMP/bm"; echo "$st" >>"$TMP/bts"
        echo "$sm" >>"$TMP/bms"; echo "$l" >>"$TMP/bl"
        echo "| $r | (b) balance + tcpdump -i cluster | $rx | $g | $l | $d | $tt | $mt | $t | $tm | $st | $sm | $v | $macct |"
      fi
    done
  done
  MA=$(median <"$TMP/a"); MBT=$(median <"$TMP/bt"); MBM=$(median <"$TMP/bm")
  SA=$(median <"$TMP/as"); SBT=$(median <"$TMP/bts"); SBM=$(median <"$TMP/bms")
  x() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (a > 0 ? b / a : 0)}'; }
  echo
  echo "**median tcpdump ns/pkt (schedstat, the primary figure), [min-max] of the rounds: (a) $SA [$(spread <"$TMP/as")];" \
    "(b) $SBT [$(spread <"$TMP/bts")] ($(x "$SA" "$SBT")x of (a))$(
      [ -n "${OLD_LR:-}" ] && echo "; (o) $(median <"$TMP/ots") [$(spread <"$TMP/ots")] ($(x "$SA" "$(median <"$TMP/ots")")x)")**."
  echo "median tcpdump + master ns/pkt (schedstat): (b) $SBM [$(spread <"$TMP/bms")] ($(x "$SA" "$SBM")x of (a))$(
    [ -n "${OLD_LR:-}" ] && echo "; (o) $(median <"$TMP/oms") [$(spread <"$TMP/oms")]")."
  echo "median ns/pkt (utime+stime, ${HZ} Hz ticks: coarse): (a) $MA; (b) tcpdump $MBT ($(x "$MA" "$MBT")x of (a)), tcpdump + master $MBM ($(x "$MA" "$MBM")x)."
  echo "median lost: (a) $(median <"$TMP/al"), (b) $(median <"$TMP/bl") of $COUNT sent."
  if [ -n "${OLD_LR:-}" ]; then
    echo "old build (o): median ns/pkt (utime+stime) tcpdump $(median <"$TMP/ot"), tcpdump + master $(median <"$TMP/om"); median lost $(median <"$TMP/ol")."
  fi
done
echo
for f in "$TMP"/mseg.*; do
  [ -e "$f" ] || continue
  echo "segment ($(basename "$f" | sed 's/mseg\.//')): $([ -s "$f" ] && cat "$f" || echo "/dev/shm (a build that does not say)")"
done
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
