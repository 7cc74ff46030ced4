#!/usr/bin/env bash
# bench/record-file-ab.sh: `linerate record -i pcap:FILE` CPU per packet, two builds interleaved
# (the indexer's and the writer's cost without a live port; reading the input file included).
# By hand, never in CI; run under `flock /work/bench.lock`.
#
#   A=/tmp/lr-main/linerate B=target/release/linerate bash bench/record-file-ab.sh ROUNDS FILE...
#   per run: user and sys CPU (s, /usr/bin/time), ns per packet, max RSS (kB), index bytes, load
# Make a file: linerate gen -o pcap:F --size 64 --flows 100000 -c 14M (1 GiB of 64 B frames).
set -u
A=${A:?A: the first build} B=${B:?B: the second build}
R=$1
shift
for f in "$@"; do
  n=$(capinfos -c -M "$f" | awk '/Number of packets/{print $NF}')
  for r in $(seq 1 "$R"); do
    for v in A B; do
      bin=${!v}
      d=$(mktemp -d "${DIR:-/var/tmp}/record-file-ab.XXXXXX")
      rmdir "$d"
      /usr/bin/time -f "%U %S %M" -o "$d.time" "$bin" record -q -i pcap:"$f" "$d" >/dev/null 2>&1
      read -r u s m <"$d.time"
      idx=$(stat -c %s "$d"/*.idx | paste -sd+ | bc)
      echo "$(basename "$f") $v run$r user=$u sys=$s ns/pkt=$(echo "($u+$s)*1000000000/$n" | bc) rss_kb=$m idx_bytes=$idx load=$(cut -d' ' -f1 /proc/loadavg)"
      rm -rf -- "$d" "$d.time"
    done
  done
done
