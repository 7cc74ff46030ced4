#!/usr/bin/env bash
# bench/pcap-ab.sh OLD NEW [PACKETS] [RUNS]: pcap read + write of an older build against a newer
# one, with tcpdump (the goal's peer) in every round, interleaved: each round runs
# `tcpdump -r F -w /dev/null`, OLD and NEW `linerate count -i F -q -w /dev/null`, and OLD and NEW
# `linerate count -i F -q` (read only), the order turned by one each round. F is the same file
# as bench/count.sh's pcap-read table (bench/mkpcap.py: PACKETS packets of 64 B, default 3 M),
# kept in the page cache.
#
#   flock /work/bench.lock bash bench/pcap-ab.sh /tmp/lr-old target/release/linerate 3000000 7
#
# Prints per variant: wall seconds (best, median, every run) and Mpps, and each one's rate over
# tcpdump's (best and median). First checks that OLD and NEW write byte-identical copies of F.
# Needs no root; never run in CI.
set -euo pipefail
OLD=$(realpath -e "${1:?usage: bench/pcap-ab.sh OLD NEW [PACKETS] [RUNS]}")
NEW=$(realpath -e "${2:?usage: bench/pcap-ab.sh OLD NEW [PACKETS] [RUNS]}")
cd "$(dirname "$0")/.."
PKTS=${3:-3000000} RUNS=${4:-7}
OUT=bench/out; mkdir -p "$OUT"
F=$OUT/read-$PKTS.pcap
[ -f "$F" ] || python3 bench/mkpcap.py "$F" "$PKTS"
cat "$F" >/dev/null
D=$(mktemp -d /dev/shm/linerate-pcap-ab.XXXXXX)
trap 'rm -rf -- "$D"' EXIT
"$OLD" count -i "$F" -q -w "$D/old.pcap" >/dev/null 2>&1
"$NEW" count -i "$F" -q -w "$D/new.pcap" >/dev/null 2>&1
if ! cmp -s "$D/old.pcap" "$D/new.pcap"; then
  echo "OLD and NEW wrote different copies of $F" >&2
  exit 1
fi
rm -f -- "$D/old.pcap" "$D/new.pcap"
echo "## pcap read + write A/B ($(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "OLD=$OLD NEW=$NEW; input: $PKTS packets of 64 B ($(du -hL "$F" | cut -f1)), page cache; $RUNS rounds, interleaved; OLD and NEW copies identical."
echo
declare -A WALL
VARIANTS=("tcpdump" "old -w" "new -w" "old read" "new read")
run() { # variant
  local TIMEFORMAT='%R' tm
  case $1 in
    tcpdump) tm=$({ time tcpdump -r "$F" -w /dev/null >/dev/null 2>&1; } 2>&1) ;;
    "old -w") tm=$({ time "$OLD" count -i "$F" -q -w /dev/null >/dev/null 2>&1; } 2>&1) ;;
    "new -w") tm=$({ time "$NEW" count -i "$F" -q -w /dev/null >/dev/null 2>&1; } 2>&1) ;;
    "old read") tm=$({ time "$OLD" count -i "$F" -q >/dev/null 2>&1; } 2>&1) ;;
    "new read") tm=$({ time "$NEW" count -i "$F" -q >/dev/null 2>&1; } 2>&1) ;;
  esac
  WALL[$1]+="$tm "
}
for ((r = 0; r < RUNS; r++)); do
  for ((k = 0; k < ${#VARIANTS[@]}; k++)); do
    run "${VARIANTS[$(((k + r) % ${#VARIANTS[@]}))]}"
  done
done
echo "| variant | best s | median s | Mpps (best) | vs tcpdump (best) | vs tcpdump (median) | runs (s) |"
echo "|---|---|---|---|---|---|---|"
args=()
for v in "${VARIANTS[@]}"; do args+=("$v" "${WALL[$v]}"); done
python3 - "$PKTS" "${args[@]}" <<'PY'
import statistics, sys
n = int(sys.argv[1]); a = sys.argv[2:]
res = {a[i]: [float(x) for x in a[i + 1].split()] for i in range(0, len(a), 2)}
tb, tm = min(res["tcpdump"]), statistics.median(res["tcpdump"])
for v, w in res.items():
    b, m = min(w), statistics.median(w)
    print(f"| {v} | {b:.3f} | {m:.3f} | {n/b/1e6:.2f} | {tb/b:.2f}× | {tm/m:.2f}× | {' '.join(f'{x:.3f}' for x in w)} |")
for k in ("-w", "read"):
    o, w = res[f"old {k}"], res[f"new {k}"]
    print(f"| new/old {k} | | | | {min(o)/min(w):.2f}× | {statistics.median(o)/statistics.median(w):.2f}× | |")
PY
