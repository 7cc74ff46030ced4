#!/usr/bin/env bash
# bench/pcapng-ab.sh OLD NEW [PACKETS] [RUNS]: writing pcap and pcapng with an older build
# against a newer one, interleaved: each round runs OLD pcap, OLD pcapng, NEW pcap, NEW pcapng
# (the order turned by one each round, so no variant always follows the same one), each
# `linerate count -i BIG.pcap -q -w OUT --format pcap|pcapng` into a file in /dev/shm beside the
# input (deleted after each run). SIZE (default 64) is `linerate gen --size`.
#
#   flock /work/bench.lock bash bench/pcapng-ab.sh /tmp/lr-old target/release/linerate 10000000 7
#
# Prints per variant: wall seconds (best, median, every run), CPU seconds (user + system, median),
# Mpps at the best wall time; and pcapng/pcap rate ratios per build (best and median wall). Also
# checks that OLD and NEW wrote pcapng files of the same size. Needs no root; never run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1 NEW=$2 PKTS=${3:-10000000} RUNS=${4:-7}
SIZE=${SIZE:-64}
D=$(mktemp -d /dev/shm/linerate-pcapng-ab.XXXXXX)
trap 'rm -rf -- "$D"' EXIT
F=$D/big.pcap
"$NEW" gen -o "$F" -c "$PKTS" --size "$SIZE" --flows 1000 -q >/dev/null
cat "$F" >/dev/null
echo "## pcapng/pcap A/B ($(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "OLD=$OLD NEW=$NEW; input: $PKTS packets, $(du -h "$F" | cut -f1) (\`linerate gen --size $SIZE --flows 1000\`), in /dev/shm; $RUNS rounds, interleaved."
echo

declare -A WALL CPU SZ
VARIANTS=("old pcap" "old pcapng" "new pcap" "new pcapng")
run() { # variant
  local build fmt bin out t0 t1 u0 u1
  read -r build fmt <<<"$1"
  bin=$OLD
  [ "$build" = new ] && bin=$NEW
  out=$D/out.$fmt
  # Wall, user and system seconds of the child (bash time).
  local TIMEFORMAT='%R %U %S'
  local tm
  tm=$({ time "$bin" count -i "$F" -q -w "$out" --format "$fmt" >/dev/null 2>&1; } 2>&1)
  read -r t0 u0 u1 <<<"$tm"
  WALL[$1]+="$t0 "
  CPU[$1]+="$(python3 -c "print(f'{$u0+$u1:.3f}')") "
  SZ[$1]=$(stat -c %s "$out")
  rm -f -- "$out"
}
for ((r = 0; r < RUNS; r++)); do
  for ((k = 0; k < 4; k++)); do
    run "${VARIANTS[$(((k + r) % 4))]}"
  done
done
echo "| build | format | best s | median s | CPU s (median) | Mpps (best) | runs (s) |"
echo "|---|---|---|---|---|---|---|"
args=()
for v in "${VARIANTS[@]}"; do args+=("$v" "${WALL[$v]}" "${CPU[$v]}"); done
python3 - "$PKTS" "${args[@]}" <<'PY'
import statistics, sys
n = int(sys.argv[1]); a = sys.argv[2:]
res = {}
for i in range(0, len(a), 3):
    v, w, c = a[i], [float(x) for x in a[i+1].split()], [float(x) for x in a[i+2].split()]
    res[v] = (min(w), statistics.median(w), statistics.median(c))
    b, f = v.split()
    print(f"| {b} | {f} | {min(w):.3f} | {statistics.median(w):.3f} | {statistics.median(c):.3f} | {n/min(w)/1e6:.2f} | {' '.join(f'{x:.3f}' for x in w)} |")
for b in ("old", "new"):
    p, g = res[f"{b} pcap"], res[f"{b} pcapng"]
    print(f"| {b} | pcapng/pcap rate | {p[0]/g[0]:.2f}× | {p[1]/g[1]:.2f}× | {p[2]/g[2]:.2f}× | | |")
for f in ("pcap", "pcapng"):
    o, w = res[f"old {f}"], res[f"new {f}"]
    print(f"| new/old | {f} rate | {o[0]/w[0]:.2f}× | {o[1]/w[1]:.2f}× | {o[2]/w[2]:.2f}× | | |")
PY
echo
for f in pcap pcapng; do
  [ "${SZ[old $f]}" = "${SZ[new $f]}" ] || echo "WARNING: $f sizes differ: old ${SZ[old $f]}, new ${SZ[new $f]}"
done
echo "output sizes: pcap ${SZ[new pcap]} B, pcapng ${SZ[new pcapng]} B"
