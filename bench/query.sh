#!/bin/sh
# The time to find a rare host in a directory of captures: `linerate query DIR 'host X'` through
# the files' indexes (1 MiB blocks, as linerate record writes them) against `tcpdump -r` over
# every file, interleaved, every run shown, medians at the end. Run by hand, never in CI.
#
# usage: bench/query.sh [FILES [PACKETS_PER_FILE [ROUNDS]]]    (BIN=path/to/linerate, FLOWS=N)
# Files of 64 B frames from bench/mkpcap.py (76 B records, FLOWS flows, 100'000 unless said):
# the host 81.48.57.1 is 1 packet in FLOWS (0.001 %), 10 per million-packet file, spread evenly
# over the whole file (the worst case for an index: 10 blocks of 1 MiB per file); FLOWS=1000000:
# once per file.
set -eu
FILES=${1:-4}
PKTS=${2:-1000000}
ROUNDS=${3:-5}
FLOWS=${FLOWS:-100000}
BIN=${BIN:-target/release/linerate}
HOST=81.48.57.1
DIR=$(mktemp -d /tmp/lr-bench-query.XXXXXX)
OUT=$(mktemp -d /tmp/lr-bench-query-out.XXXXXX)
trap 'rm -rf "$DIR" "$OUT"' EXIT
i=0
while [ "$i" -lt "$FILES" ]; do
    python3 "$(dirname "$0")/mkpcap.py" "$DIR/20231114T221320.00000${i}Z-w$i.pcap" "$PKTS" "$FLOWS"
    i=$((i + 1))
done
"$BIN" query "$DIR" --reindex -c 1 -q -w /dev/null
echo "# bench/query.sh $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg), $FILES files x $PKTS packets, $FLOWS flows, $(du -sb "$DIR" | cut -f1) bytes with indexes ($(cat "$DIR"/*.idx | wc -c) of index)"
# Warm the page cache once (both read the same files).
cat "$DIR"/*.pcap > /dev/null
# Wall time and CPU time (user + system, children included) of each, interleaved; the query
# then once more with --no-index (every file read whole by linerate).
cpu() { awk '{print $1 + $2}' "$1"; }
lr_all=""
td_all=""
lc_all=""
tc_all=""
nc_all=""
r=0
T=$OUT/time
while [ "$r" -lt "$ROUNDS" ]; do
    /usr/bin/time -f "%U %S %e" -o "$T.lr" "$BIN" query "$DIR" -q -w "$OUT/out" "host $HOST"
    n=$(tcpdump -r "$OUT/out" 2>/dev/null | wc -l)
    /usr/bin/time -f "%U %S %e" -o "$T.td" sh -c "for f in '$DIR'/*.pcap; do tcpdump -r \"\$f\" -w - 'host $HOST' 2>/dev/null; done > '$OUT/td'"
    /usr/bin/time -f "%U %S %e" -o "$T.nc" "$BIN" query "$DIR" -q --no-index -w /dev/null "host $HOST"
    lr=$(awk '{print $3}' "$T.lr")
    td=$(awk '{print $3}' "$T.td")
    echo "round $r: linerate query $lr s wall $(cpu "$T.lr") s cpu ($n packets); tcpdump -r over the files $td s wall $(cpu "$T.td") s cpu; linerate query --no-index $(awk '{print $3}' "$T.nc") s wall $(cpu "$T.nc") s cpu"
    lr_all="$lr_all $lr"
    td_all="$td_all $td"
    lc_all="$lc_all $(cpu "$T.lr")"
    tc_all="$tc_all $(cpu "$T.td")"
    nc_all="$nc_all $(cpu "$T.nc")"
    r=$((r + 1))
done
med() { printf '%s\n' $1 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "median wall: linerate query $(med "$lr_all") s, tcpdump -r $(med "$td_all") s"
echo "median cpu: linerate query $(med "$lc_all") s, tcpdump -r $(med "$tc_all") s, linerate query --no-index $(med "$nc_all") s"
