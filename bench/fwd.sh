#!/usr/bin/env bash
# Forwarding benchmark: a three-namespace line A -> B -> C, everything B does on one core (core 1).
#
#   sudo bash bench/fwd.sh [SECONDS] [RUNS]      (defaults: 2 s per measurement, best of 3)
#
# Build first (target/release/linerate); the script does not build.
#
# Source in A, on core 0: xdp-trafficgen (XDP live frames, ~6 Mpps on one core) when found
# ($XDP_TRAFFICGEN, else /opt/linerate-peers/xdp-tools-1.6.3/xdp-trafficgen/xdp-trafficgen): IPv6/UDP frames of
# 62 B + CRC (its default size, the smallest IPv6/UDP frame). Without it, trafgen (AF_PACKET,
# ~1 Mpps at best) sends IPv4/UDP 60 B + CRC, and the rows are bound by the source. To build
# xdp-tools 1.6.3 (needs clang-14, llc-14, m4, bpftool, libbpf-dev):
#   git clone --branch v1.6.3 https://github.com/xdp-project/xdp-tools && cd xdp-tools &&
#   FORCE_SYSTEM_LIBBPF=1 CLANG=clang-14 LLC=llc-14 ./configure && make -C lib &&
#   make -C xdp-trafficgen && make -C xdp-bench
#
# One core for B: B's input veth (vB0) runs its receive processing (NAPI: XDP programs, the
# copy into an AF_XDP socket, ip_forward, the bridge) in a NAPI thread pinned to core 1, where
# the user-space forwarders run too (threaded NAPI; veth otherwise does its receive work on the
# sender's core). C's veth (vC) is the sink: an XDP_DROP program ($XDP_DROP_OBJ, else
# linerate's bpf/xdp_drop.o) in a NAPI thread pinned to core SINK_CORE (default 1, B's core:
# its XDP_DROP costs every forwarder the same ~tens of ns per packet); without that object C's
# stack drops the frames (not addressed to vC). SINK_CORE=0 (the sink beside the source, as
# this script did before) measures the sink, not B, on this kernel: the source's in-kernel
# send loop keeps vC's NAPI thread from running, vC's ring overflows, and every forwarder's
# output (xdp-bench's and ip_forward's too) reads 0.10-0.15 Mpps while 1-5 Mpps come in. GRO is on for
# vB0 and vC (it gives a veth NAPI, which XDP redirects into it need).
#
# Rows (best of RUNS for the linerate rows and every goal peer: ip_forward, testpmd af_xdp,
# xdp-bench; one run for the rest; the kernel engine and xdp-bench in alternation, round by
# round, their goal on the medians):
#   linerate fwd --engine kernel (bpf/xdp_fwd.c: DEVMAP redirect, l2fwd MAC rewrite)
#   linerate fwd --engine xsk xdp:vB0 -> xdp:vB1 (AF_XDP copy mode, one shared UMEM)
#   linerate fwd afpacket:vB0 -> afpacket:vB1
#   Linux ip_forward (IPv6 with xdp-trafficgen: bpf/bench_hoplimit.o on vB0 resets the hop
#     limit of the recycled live frames; IPv4 with trafgen), a Linux bridge
#   dpdk-testpmd io on net_af_xdp and on net_af_packet (no hugepages), if installed
#   xdp-bench redirect ($XDP_BENCH, else /opt/linerate-peers/xdp-tools-1.6.3/xdp-bench/xdp-bench), if found
# "A sent" = vA tx_packets + tx_dropped, "in" = vB0 rx_packets, "out" = vC rx_packets (deltas).
# Then capture on vB0: linerate count -i xdp:vB0 vs -i afpacket:vB0 (one run each).
# AB="OLD_BIN NEW_BIN" instead: the kernel engine of two builds interleaved with xdp-bench
# (AB_ENGINE=xsk: the xsk engine of the two builds; AB_ENGINE=afpacket: afpacket:vB0 ->
# afpacket:vB1 of the two builds). Without xdp-trafficgen and trafgen the source is
# `linerate gen -o xdp:vA` (XDP live frames; GEN_BIN picks the build, default this one's).
# Prints Markdown tables.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-2}
RUNS=${2:-3}
OUT=bench/out
mkdir -p "$OUT"
LR=$PWD/target/release/linerate
[ -x "$LR" ] || { echo "build first: cargo build --release -p linerate-cli" >&2; exit 1; }
# Peers built by bench/peers.sh (a path in the environment wins).
[ -f bench/out/peers.env ] && . bench/out/peers.env
XTG=${XDP_TRAFFICGEN:-/opt/linerate-peers/xdp-tools-1.6.3/xdp-trafficgen/xdp-trafficgen}
XBENCH=${XDP_BENCH:-/opt/linerate-peers/xdp-tools-1.6.3/xdp-bench/xdp-bench}
XDROP=${XDP_DROP_OBJ:-bpf/xdp_drop.o}
[ -x "$XTG" ] || XTG=""
[ -x "$XBENCH" ] || XBENCH=""
[ -f "$XDROP" ] || XDROP=""
if [ -z "$XTG" ]; then
  if command -v trafgen >/dev/null; then
    echo "xdp-trafficgen not found (set XDP_TRAFFICGEN): using trafgen, which cannot saturate" \
      "the forwarders; build xdp-tools 1.6.3 as the header of this script says." >&2
  else
    echo "neither xdp-trafficgen nor trafgen found: the source is linerate gen -o xdp:vA" >&2
  fi
fi

# Unique interface names: the NAPI threads are named after them (napi/IFACE-ID).
S=$(( $$ % 10000 ))
IA=fa$S IB0=fb0$S IB1=fb1$S IC=fc$S
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
ip link add "$IA" netns "$A" type veth peer name "$IB0" netns "$B"
ip link add "$IB1" netns "$B" type veth peer name "$IC" netns "$C"
for x in "$A:$IA" "$B:$IB0" "$B:$IB1" "$C:$IC"; do ip -n "${x%%:*}" link set "${x#*:}" up; done
ip netns exec "$A" ethtool -K "$IA" sg off >/dev/null 2>&1 || true
ip netns exec "$B" ethtool -K "$IB0" gro on >/dev/null
ip netns exec "$C" ethtool -K "$IC" gro on >/dev/null
ip netns exec "$B" sh -c "echo 1 > /sys/class/net/$IB0/threaded"
ip netns exec "$C" sh -c "echo ${SINK_THREADED:-1} > /sys/class/net/$IC/threaded"
if [ -n "$XDROP" ]; then
  ip -n "$C" link set dev "$IC" xdpdrv obj "$XDROP" sec xdp
  SINK="XDP_DROP on vC ($XDROP), NAPI thread on core ${SINK_CORE:-1}"
else
  SINK="C's stack (frames not addressed to vC, dropped early), NAPI thread on core ${SINK_CORE:-1}"
fi
pin_napi() { # the NAPI threads of vB0 -> core 1, vC -> core SINK_CORE
  local pid comm
  while read -r pid comm; do
    case "$comm" in
      "napi/$IB0-"*) taskset -pc 1 "$pid" >/dev/null ;;
      "napi/$IC-"*) taskset -pc "${SINK_CORE:-1}" "$pid" >/dev/null ;;
    esac
  done < <(ps -eo pid=,comm=)
}
pin_napi
mac() { ip -n "$1" -o link show "$2" | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2; }
MACA=$(mac "$A" "$IA") MACB0=$(mac "$B" "$IB0")
FAKE=02:00:00:00:00:01
cat > "$OUT/fwd64.cfg" <<CFG
{ eth(da=DMAC, sa=SMAC, type=0x0800), ipv4(saddr=198.18.0.1, daddr=198.19.0.2, ttl=64, df), udp(sp=1024, dp=9), fill(0x00, 18) }
CFG
cnt() { ip netns exec "$1" cat "/sys/class/net/$2/statistics/$3"; }

start_gen() { # DMAC
  if [ -n "$XTG" ]; then
    setsid ip netns exec "$A" taskset -c 0 "$XTG" udp -m "$1" -A fd00:1::1 -a fd00:2::2 -l 64 \
      -I 60 "$IA" >"$OUT/gen.out" 2>&1 &
  elif command -v trafgen >/dev/null; then
    setsid ip netns exec "$A" taskset -c 0 trafgen --no-sock-mem -Q -C -P 1 -i "$OUT/fwd64.cfg" \
      --cpp -D DMAC="$1" -D SMAC="$MACA" -o "$IA" >"$OUT/gen.out" 2>&1 &
  else
    # Neither: linerate's own generator (XDP live frames, IPv4/UDP 64 B), GEN_BIN or this build.
    setsid ip netns exec "$A" taskset -c 0 "${GEN_BIN:-$LR}" gen -o "xdp:$IA" --dst-mac "$1" \
      -t 3600 --no-console >"$OUT/gen.out" 2>&1 &
  fi
  GEN=$!
}

declare -a ROWS
BEST_OUT=0 BEST_IN=0 BEST_SENT=0
measure() { # sets LAST_* for one window after 0.5 s of warm-up
  sleep 0.5
  pin_napi
  local c0 i0 a0 d0 c1 i1 a1 d1
  c0=$(cnt "$C" "$IC" rx_packets); i0=$(cnt "$B" "$IB0" rx_packets)
  a0=$(cnt "$A" "$IA" tx_packets); d0=$(cnt "$A" "$IA" tx_dropped)
  sleep "$SECS"
  c1=$(cnt "$C" "$IC" rx_packets); i1=$(cnt "$B" "$IB0" rx_packets)
  a1=$(cnt "$A" "$IA" tx_packets); d1=$(cnt "$A" "$IA" tx_dropped)
  LAST_OUT=$(( (c1 - c0) / SECS )); LAST_IN=$(( (i1 - i0) / SECS ))
  LAST_SENT=$(( (a1 - a0 + d1 - d0) / SECS ))
}

run_fwd() { # name, runs, DMAC, command in B...
  local name=$1 runs=$2 dmac=$3 r all=""; shift 3
  BEST_OUT=0 BEST_IN=0 BEST_SENT=0
  for r in $(seq 1 "$runs"); do
    setsid ip netns exec "$B" taskset -c 1 "$@" >"$OUT/fwd-${name// /_}-$r.out" 2>&1 &
    FWD=$!
    sleep 0.7
    start_gen "$dmac"
    measure
    stop_group "$GEN"; GEN=""
    stop_group "$FWD"; FWD=""
    sleep 0.2
    echo "$name run $r: A sent $LAST_SENT, in $LAST_IN, out $LAST_OUT pps" >&2
    all="$all${all:+ / }$(printf "%'d" "$LAST_OUT")"
    if [ "$LAST_OUT" -gt "$BEST_OUT" ]; then
      BEST_OUT=$LAST_OUT BEST_IN=$LAST_IN BEST_SENT=$LAST_SENT
    fi
  done
  ROWS+=("| $name | $(printf "%'d" "$BEST_SENT") | $(printf "%'d" "$BEST_IN") | **$(printf "%'d" "$BEST_OUT")** | $all |")
  FB[$name]=$BEST_OUT
}

declare -A FB # forwarder name -> best pps out to vC
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# AB="OLD_BIN NEW_BIN": an interleaved A/B of the kernel engine (AB_ENGINE=xsk: the xsk engine)
# of two builds, with xdp-bench redirect in each round for the kernel engine, RUNS rounds (one
# 2 s window each), then the rows and medians.
if [ -n "${AB:-}" ]; then
  read -r AB_OLD AB_NEW <<<"$AB"
  E=${AB_ENGINE:-kernel}
  if [ "$E" = afpacket ]; then
    FWD_ARGS=(fwd -i "afpacket:$IB0" -o "afpacket:$IB1" --period 0)
  else
    FWD_ARGS=(fwd -i "xdp:$IB0" -o "xdp:$IB1" --engine "$E" --period 0)
  fi
  AO=() AN=() AX=()
  for r in $(seq 1 "$RUNS"); do
    run_fwd "old $E engine, round $r" 1 "$MACB0" "$AB_OLD" "${FWD_ARGS[@]}"
    AO+=("$BEST_OUT")
    run_fwd "new $E engine, round $r" 1 "$MACB0" "$AB_NEW" "${FWD_ARGS[@]}"
    AN+=("$BEST_OUT")
    if [ -n "$XBENCH" ] && [ "$E" = kernel ]; then
      run_fwd "xdp-bench redirect, round $r" 1 "$MACB0" "$XBENCH" redirect -m native -i 60 "$IB0" "$IB1"
      ip -n "$B" link set dev "$IB0" xdp off 2>/dev/null || true
      AX+=("$BEST_OUT")
    fi
  done
  echo "| forwarder in B | A sent (pps) | into vB0 (pps) | out to vC (pps) | runs (out) |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  if [ "${#AX[@]}" -gt 0 ]; then
    echo "Medians out: old $(med "${AO[@]}"), new $(med "${AN[@]}"), xdp-bench $(med "${AX[@]}") pps"
  else
    echo "Medians out: old $(med "${AO[@]}"), new $(med "${AN[@]}") pps"
  fi
  exit 0
fi

# BUSY=1: the xsk engine without and with AF_XDP busy polling (--busy-poll USECS for each of
# BUSY_USECS, default "20 50"), interleaved, RUNS rounds (one window each); then ip_forward.
if [ -n "${BUSY:-}" ]; then
  declare -A BM
  for r in $(seq 1 "$RUNS"); do
    run_fwd "xsk, no busy polling, round $r" 1 "$MACB0" \
      "$LR" fwd -i "xdp:$IB0" -o "xdp:$IB1" --engine xsk --period 0
    BM[off]="${BM[off]:-} $BEST_OUT"
    for u in ${BUSY_USECS:-20 50}; do
      run_fwd "xsk --busy-poll $u, round $r" 1 "$MACB0" \
        "$LR" fwd -i "xdp:$IB0" -o "xdp:$IB1" --engine xsk --period 0 --busy-poll "$u"
      BM[$u]="${BM[$u]:-} $BEST_OUT"
    done
  done
  BUSY_DONE=1
fi

# linerate fwd: l2fwd rewrite (dst 02:00:00:00:00:01, src vB1)
if [ -z "${BUSY_DONE:-}" ]; then
# The kernel engine and xdp-bench redirect do the same work (an XDP program redirecting to vB1):
# measured in alternation, round by round, so that the machine's drift between two blocks of
# runs (the runs jump between two modes here, about 1.0 and 1.8 Mpps, whatever the program)
# cannot pass for a difference; the goal compares their medians. Without xdp-bench, the kernel
# engine alone, RUNS runs.
declare -a KO XO
KR="" XR="" KB=0 XB=0 # runs as text; "out sent in" of the best run
for r in $(seq 1 "$RUNS"); do
  run_fwd "linerate fwd --engine kernel, round $r" 1 "$MACB0" \
    "$LR" fwd -i "xdp:$IB0" -o "xdp:$IB1" --engine kernel --period 0
  unset 'ROWS[-1]'
  KO+=("$BEST_OUT") KR="$KR${KR:+ / }$(printf "%'d" "$BEST_OUT")"
  [ "$BEST_OUT" -gt "${KB%% *}" ] && KB="$BEST_OUT $BEST_SENT $BEST_IN"
  [ -n "$XBENCH" ] || continue
  run_fwd "xdp-bench redirect (native), round $r" 1 "$MACB0" "$XBENCH" redirect -m native -i 60 "$IB0" "$IB1"
  ip -n "$B" link set dev "$IB0" xdp off 2>/dev/null || true
  unset 'ROWS[-1]'
  XO+=("$BEST_OUT") XR="$XR${XR:+ / }$(printf "%'d" "$BEST_OUT")"
  [ "$BEST_OUT" -gt "${XB%% *}" ] && XB="$BEST_OUT $BEST_SENT $BEST_IN"
done
pair_row() { # name, runs text, "out sent in" of the best run, outs...
  local name=$1 text=$2 best sent in; read -r best sent in <<<"$3"; shift 3
  ROWS+=("| $name (interleaved; median $(printf "%'d" "$(med "$@")")) | $(printf "%'d" "$sent") | $(printf "%'d" "$in") | **$(printf "%'d" "$best")** | $text |")
  FB[$name]=$best
  FM[$name]=$(med "$@")
}
declare -A FM # name -> median pps out of the interleaved rounds
pair_row "linerate fwd --engine kernel" "$KR" "$KB" "${KO[@]}"
[ -n "$XBENCH" ] && pair_row "xdp-bench redirect (native)" "$XR" "$XB" "${XO[@]}"
run_fwd "linerate fwd --engine xsk (xdp, copy, shared UMEM)" "$RUNS" "$MACB0" \
  "$LR" fwd -i "xdp:$IB0" -o "xdp:$IB1" --engine xsk --period 0
run_fwd "linerate fwd afpacket" "$RUNS" "$MACB0" \
  "$LR" fwd -i "afpacket:$IB0" -o "afpacket:$IB1" --period 0
fi

# ip_forward
if [ -n "$XTG" ]; then
  ip -n "$B" addr add fd00:1::2/64 dev "$IB0" nodad
  ip -n "$B" addr add fd00:2::1/64 dev "$IB1" nodad
  # The next hop's MAC is vB0's own: a recycled live frame still reaches vB0's stack.
  ip -n "$B" neigh replace fd00:2::2 lladdr "$MACB0" dev "$IB1" nud permanent
  ip netns exec "$B" sysctl -qw net.ipv6.conf.all.forwarding=1
  ip -n "$B" link set dev "$IB0" xdpdrv obj bpf/bench_hoplimit.o sec xdp
  run_fwd "Linux ip_forward (IPv6)" "$RUNS" "$MACB0" sleep 3600
  ip -n "$B" link set dev "$IB0" xdpdrv off
  ip netns exec "$B" sysctl -qw net.ipv6.conf.all.forwarding=0
else
  ip -n "$B" addr add 198.18.0.2/24 dev "$IB0"
  ip -n "$B" addr add 198.19.0.1/24 dev "$IB1"
  ip -n "$B" neigh replace 198.19.0.2 lladdr "$FAKE" dev "$IB1" nud permanent
  ip netns exec "$B" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
    "net.ipv4.conf.$IB0.rp_filter=0"
  run_fwd "Linux ip_forward (IPv4)" "$RUNS" "$MACB0" sleep 3600
  ip netns exec "$B" sysctl -qw net.ipv4.ip_forward=0
fi
ip -n "$B" addr flush dev "$IB0"; ip -n "$B" addr flush dev "$IB1"
if [ -n "${BUSY_DONE:-}" ]; then
  echo "| forwarder in B | A sent (pps) | into vB0 (pps) | out to vC (pps) | runs (out) |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  ipf=${FB["Linux ip_forward (IPv6)"]:-${FB["Linux ip_forward (IPv4)"]:-0}}
  for k in off ${BUSY_USECS:-20 50}; do
    # shellcheck disable=SC2086
    m=$(med ${BM[$k]})
    echo "Median out, xsk busy polling $k: $m pps ($(awk -v a="$m" -v b="$ipf" 'BEGIN { printf "%.2f", b ? a / b : 0 }')x ip_forward's best $ipf)"
  done
  exit 0
fi

# bridge (unknown unicast to the fake MAC floods to vB1)
ip -n "$B" link add br0 type bridge
ip -n "$B" link set "$IB0" master br0; ip -n "$B" link set "$IB1" master br0
ip -n "$B" link set br0 up
run_fwd "Linux bridge" 1 "$FAKE" sleep 3600
ip -n "$B" link del br0

# dpdk-testpmd io-fwd
if command -v dpdk-testpmd >/dev/null; then
  TP="dpdk-testpmd --no-huge --no-pci -m 512 -l 0-1 --no-shconf --file-prefix lrf$$"
  TPA="-- --forward-mode=io --nb-cores=1 --total-num-mbufs=32768 --stats-period 1"
  # shellcheck disable=SC2086
  run_fwd "dpdk-testpmd io net_af_xdp" "$RUNS" "$MACB0" $TP \
    --vdev "net_af_xdp0,iface=$IB0,start_queue=0,queue_count=1" \
    --vdev "net_af_xdp1,iface=$IB1,start_queue=0,queue_count=1" $TPA
  # testpmd (libbpf xsk) attaches its program through rtnetlink: a killed testpmd leaves it.
  ip -n "$B" link set dev "$IB0" xdp off 2>/dev/null || true
  ip -n "$B" link set dev "$IB1" xdp off 2>/dev/null || true
  # shellcheck disable=SC2086
  run_fwd "dpdk-testpmd io net_af_packet" 1 "$MACB0" $TP \
    --vdev "net_af_packet0,iface=$IB0,qpairs=1,blocksz=4096,framesz=2048,framecnt=4096" \
    --vdev "net_af_packet1,iface=$IB1,qpairs=1,blocksz=4096,framesz=2048,framecnt=4096" $TPA
else
  ROWS+=("| dpdk-testpmd | not installed (Debian: dpdk-dev) | | | |")
fi

# xdp-bench redirect (bpf_redirect to vB1): measured above, round by round with the kernel engine.
if [ -z "$XBENCH" ]; then
  ROWS+=("| xdp-bench redirect | not found (set XDP_BENCH; see the header) | | | |")
fi

# capture on vB0 (count only): xdp vs afpacket
declare -a CAP
capture() { # name, port
  setsid ip netns exec "$B" taskset -c 1 "$LR" count -i "$2" -q --json >"$OUT/cap-$1.out" 2>&1 &
  FWD=$!
  sleep 1
  start_gen "$MACB0"
  sleep 1
  pin_napi
  local i0 i1; i0=$(cnt "$B" "$IB0" rx_packets); sleep "$SECS"; i1=$(cnt "$B" "$IB0" rx_packets)
  stop_group "$GEN"; GEN=""
  stop_group "$FWD"; FWD=""
  local got
  got=$(grep '"summary"' "$OUT/cap-$1.out" | grep -o '"pkts":[0-9]*' | head -1 | cut -d: -f2 || true)
  CAP+=("| linerate count -i ${2%%:*}:vB0 | $(printf "%'d" $(( (i1 - i0) / SECS ))) | ${got:-?} |")
}
capture xdp "xdp:$IB0"
capture afpacket "afpacket:$IB0"

echo
if [ -n "$XTG" ]; then
  echo "Source: xdp-trafficgen udp (IPv6, 62 B + CRC) in A on core 0."
elif command -v trafgen >/dev/null; then
  echo "Source: trafgen (IPv4, 60 B + CRC) in A on core 0 (xdp-trafficgen not found)."
else
  echo "Source: linerate gen -o xdp:vA (XDP live frames) in A on core 0 (neither xdp-trafficgen nor trafgen found)."
fi
echo "B on core 1 (forwarder and vB0's NAPI thread); sink: $SINK; ${SECS} s per window."
echo
echo "| forwarder in B | A sent (pps) | into vB0 (pps) | out to vC (pps, best) | runs (out) |"
echo "|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
. bench/lib.sh
ipf=${FB["Linux ip_forward (IPv6)"]:-${FB["Linux ip_forward (IPv4)"]:-}}
goal "fwd --engine xsk, B on one core" "${FB["linerate fwd --engine xsk (xdp, copy, shared UMEM)"]:-}" "Linux ip_forward" "$ipf" 1.5 pps
goal "fwd --engine kernel (median of $RUNS, interleaved)" "${FM["linerate fwd --engine kernel"]:-}" "xdp-bench redirect" "${FM["xdp-bench redirect (native)"]:-}" 0.95 pps
echo
echo "Capture on vB0 (same source), ${SECS} s window after 1 s warm-up:"
echo
echo "| tool | into vB0 (pps) | packets counted (whole run) |"
echo "|---|---|---|"
printf '%s\n' "${CAP[@]}"
