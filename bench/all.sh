#!/usr/bin/env bash
# bench/all.sh: every benchmark table in one go, on this machine as it is now, with the peers in
# the same run, then the goals table: each goal row with linerate's figure, its peer's, the ratio
# and the goal. Takes about 30 minutes (record alone about 12).
#
#   sudo bash bench/all.sh                  # prints everything, keeps it in bench/out/all-DATE.md
#   sudo UPDATE=1 bash bench/all.sh         # also puts it at the top of BENCHMARKS.md
#   sudo ONLY="cluster pcapng" bash bench/all.sh   # some tables only (count gen fwd cluster
#                                                  # flows pcapng kafka lua record)
#
# Peers come from `bash bench/peers.sh` (run it first on a fresh machine: it installs and builds
# them and writes bench/out/peers.env). The figures of a small VM are not claims: the ratios to a
# peer measured minutes apart on the same machine are what count. Nothing else should run
# meanwhile (the header shows the load before and after). By hand, never in CI.
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench/all.sh: needs root (veth namespaces, XDP)" >&2; exit 2; }
[ -f bench/out/peers.env ] || { echo "bench/all.sh: run 'bash bench/peers.sh' first (installs the peers)" >&2; exit 2; }
cargo build --release -q -p linerate-cli || exit 1
ALL="count gen fwd cluster flows pcapng kafka lua record"
ONLY=${ONLY:-$ALL}
STAMP=$(date -u +%Y-%m-%dT%H%MZ)
mkdir -p bench/out
REPORT=bench/out/all-$STAMP.md
export BENCH_GOALS
BENCH_GOALS=$(mktemp /tmp/linerate-goals.XXXXXX)
trap 'rm -f -- "$BENCH_GOALS"' EXIT
T0=$(date +%s)

section() { # name command...: runs one bench script, its table into the report
  local name=$1 s e
  shift
  case " $ONLY " in *" $name "*) ;; *) return 0 ;; esac
  s=$(date +%s)
  echo "bench/all.sh: $name ($*) ..." >&2
  {
    echo
    echo "<details open><summary><code>$*</code></summary>"
    echo
    "$@" 2>"bench/out/all-$name.err" || echo "**$name: exited $? (stderr in bench/out/all-$name.err)**"
    e=$(date +%s)
    echo
    echo "($((e - s)) s)</details>"
  } >>"$REPORT.body"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
COMMIT="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates bench || echo ' (with uncommitted changes)')"
rm -f "$REPORT.body"
section count bash bench/count.sh 4 3000000
section gen bash bench/gen.sh 4
section fwd bash bench/fwd.sh 2 5
section cluster env DUR=3 RUNS=5 bash bench/cluster.sh
section flows env ROUNDS=5 bash bench/flows.sh 3000000 100000
section pcapng env SIZE=64 bash bench/pcapng.sh 5000000 7
section kafka env RUNS=3 bash bench/kafka.sh 3000000 100000
section lua env -u ONLY bash bench/lua.sh target/release/linerate 5 2
section record env -u ONLY LR=target/release/linerate bash bench/record.sh
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

{
  echo "## bench/all.sh, $STAMP"
  echo
  echo "- Commit: $COMMIT"
  echo "- Kernel: $(uname -r); CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) vCPUs"
  echo "- Load before: $LOAD_BEFORE; after: $LOAD_AFTER; took $(( $(date +%s) - T0 )) s"
  echo "- Command: \`sudo bash bench/all.sh\`$( [ "$ONLY" != "$ALL" ] && echo " (ONLY=\"$ONLY\")")"
  echo
  echo "### Goals (linerate / peer, same run; higher is better)"
  echo
  echo "| work | linerate | peer | peer's figure | ratio | goal | met |"
  echo "|---|---|---|---|---|---|---|"
  python3 - "$BENCH_GOALS" <<'PY'
import math, sys
def fig(v, unit):
    try:
        x = float(v)
    except ValueError:
        return "n/a"
    if math.isnan(x):
        return "n/a"
    if unit == "pps":
        return f"{x / 1e6:.3f} Mpps"
    return f"{x:.2f} {unit}"
for line in open(sys.argv[1]):
    work, lr, peer, pf, goal, unit = (line.rstrip("\n").split("\t") + [""] * 6)[:6]
    try:
        r = float(lr) / float(pf)
        ratio = "n/a" if math.isnan(r) else f"{r:.3f}×"
    except (ValueError, ZeroDivisionError):
        r, ratio = float("nan"), "n/a"
    if goal in ("", "-"):
        g, met = "-", "-"
    else:
        g = f"≥ {float(goal):.2f}×"
        met = "n/a" if math.isnan(r) else ("yes" if r >= float(goal) else "**no**")
    print(f"| {work} | {fig(lr, unit)} | {peer} | {fig(pf, unit)} | {ratio} | {g} | {met} |")
PY
  echo
  echo "### Tables"
  cat "$REPORT.body"
} >"$REPORT"
rm -f "$REPORT.body"
cat "$REPORT"

if [ -n "${UPDATE:-}" ]; then
  python3 - "$REPORT" <<'PY'
import sys
rep = open(sys.argv[1]).read().strip()
begin, end = "<!-- bench/all.sh: begin -->", "<!-- bench/all.sh: end -->"
s = open("BENCHMARKS.md").read()
block = f"{begin}\n{rep}\n{end}"
if begin in s:
    a, rest = s.split(begin, 1)
    s = a + block + rest.split(end, 1)[1]
else:
    head, sep, body = s.partition("\n## ")
    s = head.rstrip() + "\n\n" + block + "\n\n" + sep.lstrip("\n") + body
open("BENCHMARKS.md", "w").write(s)
PY
  echo "bench/all.sh: BENCHMARKS.md updated (between the bench/all.sh markers)" >&2
fi
