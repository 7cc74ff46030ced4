#!/usr/bin/env bash
# bench/lua.sh: what a Lua script costs each tool (docs/lua.md), against the same tool without
# one, in the same run: four rows, each a scripted command and its unscripted twin.
#
#   gen     into pcap:/dev/null, 256 sources x 1000 ports: --flows 256 --sport 1024-2023 vs a
#           modify() setting p.ip4.src and p.udp.sport (goal >= 0.8x)
#   gen     8 math.random calls per packet into 4 fields (MoonGen's heavy case) vs the same
#           fields random by flags (goal >= 0.4x). Every gen run (and OLD's) pinned on one core
#           (GEN_CORE, default 1: taskset -c), as the fwd rows: unpinned, the scheduler moved
#           the generator's thread between the two cores in some runs and not in others, and
#           the flags row spread 36-46 % in one run
#   balance --threads -i source -n 2 -g 0:1,1: -m lua:F (q[i] = ttl % 2, the fast form) vs -m ip
#           (goal >= 0.8x); the table form is shown too. One placement for every balance run
#           (BAL_CORES, default 0:1,1: the master alone on core 0, both consumer threads on core 1,
#           as zbalance_ipc gives its master a core): left to the scheduler, the master shared a
#           core with a consumer in some runs and not in others, and the row had two speeds
#           (31 and 47 Mpps for -m ip in one run). Its CPU figure is the master thread's own
#           (its schedstat, read every 20 ms until it exits): the consumers' polling is not
#           the master's work
#   fwd     -i pcap:F (PKTS packets) -o pcap:/dev/null: --script dropping DNS vs no script
#           (goal >= 0.8x). Both fwd rows (and OLD's) run pinned on one core (FWD_CORE, default 1:
#           taskset -c), the file read once into the page cache before the first round, and the
#           figure to read is the CPU time a packet (the goal line's rate is 1e9 / that median).
#           With the old 2M-packet file a run took 60-90 ms CPU, of which the process's start
#           (the Lua state, the views, the file's open: 6.5 ms without a script, 8.8 with, from
#           a 1000-packet file) was 3-4 ns a packet, and unpinned runs spread 44-74 ns; pinned,
#           three runs of that file gave 45.2-46.3. The file is 10M packets (760 MB) now
#
#   bash bench/lua.sh [BIN] [ROUNDS] [SECONDS]     (target/release/linerate, 5 rounds, 2 s)
#   OLD=/tmp/lr-main-rel bash bench/lua.sh        A/B: each scripted row also with OLD
#   ONLY='balance|fwd' bash bench/lua.sh          only the rows whose name matches (grep -E);
#                                                 the ratios of rows left out print nan
#
# Interleaved: each round runs every command once, starting one command further on; prints every
# run, then the medians and ratios. gen and balance run SECONDS each (their JSON summary gives
# the rate); fwd reads a PKTS-packet file (default 10M, 760 MB in /tmp, made once with bench/mkpcap.py) and is
# timed from start to exit. Each run also gives its CPU time (user + system, all threads) per
# packet, and the ratios are given by it too: on a loaded machine a run waits for a CPU, which
# the rate counts and the CPU time does not. The machine's other load shows in the header: use the medians. By
# hand only; build first (cargo build --release -p linerate-cli).
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BIN=$(realpath -e "${1:-target/release/linerate}") || exit 2
ROUNDS=${2:-5} SECS=${3:-2} PKTS=${PKTS:-10000000}
ONLY=${ONLY:-} BAL_CORES=${BAL_CORES:-0:1,1} FWD_CORE=${FWD_CORE:-1} GEN_CORE=${GEN_CORE:-1}
OLD=${OLD:-}
[ -z "$OLD" ] || OLD=$(realpath -e "$OLD") || exit 2
W=$(mktemp -d /tmp/linerate-lua.XXXXXX)
trap 'rm -rf -- "$W"' EXIT
PCAP=${PCAP:-/tmp/linerate-lua-$PKTS.pcap}
mkdir -p bench/out
[ -s "$PCAP" ] || python3 bench/mkpcap.py "$PCAP" "$PKTS" 1000 || exit 1
cat -- "$PCAP" >/dev/null # in the page cache before the first fwd round

cat >"$W/set.lua" <<'EOF'
-- 256 sources x 1000 ports, as --flows 256 --sport 1024-2023
local k = 0
function modify(pkts, n)
  for i = 1, n do
    local p = pkts[i]
    p.ip4.src = 0xc6120001 + k % 256
    p.udp.sport = 1024 + k % 1000
    k = k + 1
  end
end
EOF
cat >"$W/rand.lua" <<'EOF'
-- 8 random numbers per packet into 4 fields
local random = math.random
function modify(pkts, n)
  for i = 1, n do
    local p = pkts[i]
    p.ip4.src = 0x0a000000 + random(0, 255) * 65536 + random(0, 65535)
    p.ip4.dst = 0xc6120000 + random(0, 255) * 256 + random(0, 255)
    p.udp.sport = 1024 + random(0, 255) * 64 + random(0, 63)
    p.udp.dport = 1024 + random(0, 255) * 64 + random(0, 63)
  end
end
EOF
cat >"$W/bal.lua" <<'EOF'
function balance(pkts, n, q)
  for i = 1, n do q[i] = pkts[i].ip4.ttl % 2 end
end
EOF
cat >"$W/baltab.lua" <<'EOF'
function balance(pkts, n)
  local r = {}
  for i = 1, n do r[i] = pkts[i].ip4.ttl % 2 end
  return r
end
EOF
cat >"$W/dns.lua" <<'EOF'
function filter(pkts, n)
  for i = 1, n do
    local p = pkts[i]
    if p.udp and p.udp.dport == 53 then p:drop() end
  end
end
EOF

GEN=(gen -o pcap:/dev/null -t "${SECS}s" --json -q)
RANDF=(--src-ip random:10.0.0.0-10.255.255.255 --dst-ip random:198.18.0.0-198.18.255.255
       --sport random:1024-17407 --dport random:1024-17407)
BAL=(balance --threads -i source -n 2 -g "$BAL_CORES" -t "$SECS" --json --quiet)
# Each prints "PPS NS": the wall-clock rate and the CPU time (all threads: perf stat's
# task-clock, or user + system from /usr/bin/time, 10 ms steps, without perf) per packet in ns,
# which the other helpers' load moves much less than the rate.
if perf stat -x, -e task-clock -o /dev/null true 2>/dev/null; then
  TIMED=(perf stat -x, -e task-clock -o "$W/cpu")
else
  TIMED=(/usr/bin/time -f '%U %S' -o "$W/cpu")
fi
cpu_ns() { # FILE PACKETS
  python3 -c "
try:
    t = open('$1').read()
    ms = [l.split(',')[0] for l in t.splitlines() if 'task-clock' in l]
    s = float(ms[0]) / 1e3 if ms else sum(map(float, t.split()[-2:]))
    print(round(s * 1e9 / float('$2'), 1))
except Exception:
    print('nan')"
}
gen_pps() {
  local out
  out=$("${TIMED[@]}" taskset -c "$GEN_CORE" "$@" 2>/dev/null | jq -r 'select(.type=="summary") | "\(.pps) \(.pkts)"' | tail -1)
  echo "${out% *} $(cpu_ns "$W/cpu" "${out#* }")"
}
# balance: the master thread's CPU time (the main thread: /proc/PID/task/PID/schedstat, ns,
# read every 20 ms while it runs; the last read is at most 20 ms before its end).
bal_pps() {
  local out pid ns=0 v
  "$@" >"$W/bal.json" 2>/dev/null &
  pid=$!
  while [ -r "/proc/$pid/task/$pid/schedstat" ]; do
    read -r v _ <"/proc/$pid/task/$pid/schedstat" 2>/dev/null && ns=${v:-$ns}
    sleep 0.02
  done
  wait "$pid"
  out=$(jq -r 'select(.type=="summary") | "\(.rx / .elapsed_ms * 1000) \(.rx)"' "$W/bal.json" | tail -1)
  echo "${out% *} $(python3 -c "print(round($ns / float('${out#* }'), 1))" 2>/dev/null || echo nan)"
}
fwd_pps() {
  local t0 t1
  t0=$(date +%s.%N)
  "${TIMED[@]}" taskset -c "$FWD_CORE" "$@" >/dev/null 2>&1 || { echo nan nan; return; }
  t1=$(date +%s.%N)
  echo "$(python3 -c "print(round($PKTS / ($t1 - $t0)))") $(cpu_ns "$W/cpu" "$PKTS")"
}

# name|kind|command (BIN or OLD first)
ROWS=(
  "gen flags 256x1000|gen|$BIN ${GEN[*]} --flows 256 --sport 1024-2023"
  "gen script 256x1000|gen|$BIN ${GEN[*]} --script $W/set.lua"
  "gen flags random|gen|$BIN ${GEN[*]} ${RANDF[*]}"
  "gen script 8 random|gen|$BIN ${GEN[*]} --script $W/rand.lua"
  "balance -m ip|bal|$BIN ${BAL[*]} -m ip"
  "balance -m lua q[i]|bal|$BIN ${BAL[*]} -m lua:$W/bal.lua"
  "balance -m lua table|bal|$BIN ${BAL[*]} -m lua:$W/baltab.lua"
  "fwd no script|fwd|$BIN fwd -i pcap:$PCAP -o pcap:/dev/null -q"
  "fwd --script dns|fwd|$BIN fwd -i pcap:$PCAP -o pcap:/dev/null -q --script $W/dns.lua"
)
if [ -n "$OLD" ]; then
  ROWS+=(
    "OLD gen script 256x1000|gen|$OLD ${GEN[*]} --script $W/set.lua"
    "OLD gen script 8 random|gen|$OLD ${GEN[*]} --script $W/rand.lua"
    "OLD balance -m lua q[i]|bal|$OLD ${BAL[*]} -m lua:$W/bal.lua"
    "OLD balance -m lua table|bal|$OLD ${BAL[*]} -m lua:$W/baltab.lua"
    "OLD fwd --script dns|fwd|$OLD fwd -i pcap:$PCAP -o pcap:/dev/null -q --script $W/dns.lua"
  )
fi

ALL_ROWS=("${ROWS[@]}")
if [ -n "$ONLY" ]; then
  KEEP=()
  for row in "${ROWS[@]}"; do
    if grep -qE -- "$ONLY" <<<"${row%%|*}"; then KEEP+=("$row"); fi
  done
  ROWS=("${KEEP[@]}")
  [ ${#ROWS[@]} -gt 0 ] || { echo "bench/lua.sh: ONLY='$ONLY' matches no row" >&2; exit 2; }
fi

echo "# bench/lua.sh, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds, ${SECS}s runs, $PKTS-packet file"
echo "# BIN $BIN${OLD:+, OLD $OLD}${ONLY:+, ONLY '$ONLY'}; balance placement -g $BAL_CORES (CPU: the master thread's); gen pinned on core $GEN_CORE, fwd on core $FWD_CORE"
declare -A V CPU
NR=${#ROWS[@]}
for r in $(seq "$ROUNDS"); do
  for k in $(seq 0 $((NR - 1))); do
    row=${ROWS[$(( (k + r - 1) % NR ))]}
    name=${row%%|*} rest=${row#*|}
    kind=${rest%%|*} cmd=${rest#*|}
    # shellcheck disable=SC2086
    case $kind in
      gen) got=$(gen_pps $cmd) ;;
      bal) got=$(bal_pps $cmd) ;;
      fwd) got=$(fwd_pps $cmd) ;;
    esac
    pps=${got% *} ns=${got#* }
    [ "$ns" != "$got" ] || ns=nan
    echo "round $r: $name: ${pps:-nan} pps, ${ns:-nan} ns CPU/packet"
    V[$name]="${V[$name]:-} ${pps:-nan}"
    CPU[$name]="${CPU[$name]:-} ${ns:-nan}"
  done
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR==0 ? "nan" : a[int((NR+1)/2)])}'; }
declare -A M MC
for row in "${ALL_ROWS[@]}"; do M[${row%%|*}]=nan MC[${row%%|*}]=nan; done
echo
# spread: (max - min) / median of the runs, in %
spread() { printf '%s\n' "$@" | python3 -c "
import math, sys
v = sorted(x for x in (float(l) for l in sys.stdin if l.strip()) if not math.isnan(x))
print(f'{(v[-1] - v[0]) / v[(len(v) - 1) // 2] * 100:.0f} %' if v and v[(len(v) - 1) // 2] else 'nan')"; }
echo "| command | runs (Mpps) | median (Mpps) | spread | CPU ns/packet, runs | median | spread |"
echo "|---|---|---|---|---|---|---|"
for row in "${ROWS[@]}"; do
  name=${row%%|*} cmd=${row##*|}
  # shellcheck disable=SC2086
  M[$name]=$(med ${V[$name]})
  # shellcheck disable=SC2086
  MC[$name]=$(med ${CPU[$name]})
  runs=$(for v in ${V[$name]}; do python3 -c "import math; v=float('$v'); print('nan' if math.isnan(v) else f'{v/1e6:.2f}')"; done | tr '\n' ' ')
  # shellcheck disable=SC2086
  echo "| \`${cmd//$W\//}\` ($name) | $runs | $(python3 -c "print(f'{float(\"${M[$name]}\")/1e6:.2f}')") | $(spread ${V[$name]}) | ${CPU[$name]} | ${MC[$name]} | $(spread ${CPU[$name]}) |"
done
ratio() { python3 -c "print(f'{float(\"$1\") / float(\"$2\"):.3f}')" 2>/dev/null || echo nan; }
echo
echo "ratios: gen script/flags $(ratio "${M[gen script 256x1000]}" "${M[gen flags 256x1000]}") (goal 0.8)," \
  "gen 8 random/flags $(ratio "${M[gen script 8 random]}" "${M[gen flags random]}") (goal 0.4)," \
  "balance lua/ip $(ratio "${M[balance -m lua q[i]]}" "${M[balance -m ip]}") (goal 0.8)," \
  "fwd script/none $(ratio "${M[fwd --script dns]}" "${M[fwd no script]}") (goal 0.8)"
# By CPU time: the unscripted command's ns per packet over the scripted one's.
echo "ratios by CPU time per packet: gen script/flags $(ratio "${MC[gen flags 256x1000]}" "${MC[gen script 256x1000]}")," \
  "gen 8 random/flags $(ratio "${MC[gen flags random]}" "${MC[gen script 8 random]}")," \
  "balance lua/ip $(ratio "${MC[balance -m ip]}" "${MC[balance -m lua q[i]]}")," \
  "fwd script/none $(ratio "${MC[fwd no script]}" "${MC[fwd --script dns]}")"
if [ -n "$OLD" ]; then
  echo "new/old: gen script $(ratio "${M[gen script 256x1000]}" "${M[OLD gen script 256x1000]}")," \
    "gen 8 random $(ratio "${M[gen script 8 random]}" "${M[OLD gen script 8 random]}")," \
    "balance q[i] $(ratio "${M[balance -m lua q[i]]}" "${M[OLD balance -m lua q[i]]}")," \
    "balance table $(ratio "${M[balance -m lua table]}" "${M[OLD balance -m lua table]}")," \
    "fwd script $(ratio "${M[fwd --script dns]}" "${M[OLD fwd --script dns]}")"
  echo "new/old by CPU time per packet: gen script $(ratio "${MC[OLD gen script 256x1000]}" "${MC[gen script 256x1000]}")," \
    "gen 8 random $(ratio "${MC[OLD gen script 8 random]}" "${MC[gen script 8 random]}")," \
    "balance q[i] $(ratio "${MC[OLD balance -m lua q[i]]}" "${MC[balance -m lua q[i]]}")," \
    "balance table $(ratio "${MC[OLD balance -m lua table]}" "${MC[balance -m lua table]}")," \
    "fwd script $(ratio "${MC[OLD fwd --script dns]}" "${MC[fwd --script dns]}")"
fi
echo "(MoonGen's published figure for a scripted packet generator: 14.88 Mpps per core, 10 GbE line rate of 64 B frames)"
goal "gen --script, modify() of 2 fields (256x1000 flows)" "${M[gen script 256x1000]}" "linerate gen --flows 256 --sport 1024-2023" "${M[gen flags 256x1000]}" 0.8 pps
goal "gen --script, 8 math.random into 4 fields" "${M[gen script 8 random]}" "linerate gen, the 4 fields random by flags" "${M[gen flags random]}" 0.4 pps
goal "balance --threads -m lua: (ttl % 2), master" "${M[balance -m lua q[i]]}" "linerate balance --threads -m ip" "${M[balance -m ip]}" 0.8 pps
# fwd's by CPU time: packets per CPU second (1e9 / the median ns a packet), pinned on one core
cpu_rate() { python3 -c "print(round(1e9 / float('$1')))" 2>/dev/null || echo nan; }
goal "fwd pcap -> pcap --script (drop DNS), by CPU time" "$(cpu_rate "${MC[fwd --script dns]}")" "linerate fwd pcap -> pcap, no script" "$(cpu_rate "${MC[fwd no script]}")" 0.8 pps
