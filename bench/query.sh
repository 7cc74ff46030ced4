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
trap 'rm -rf "$DIR"' EXIT
i=0
while [ "$i" -lt "$FILES" ]; do
    python3 "$(dirname "$0")/mkpcap.py" "$DIR/20231114T221320.00000${i}Z-w$i.pcap" "$PKTS" "$FLOWS"
    i=$((i + 1))
done
"$BIN" query "$DIR" --reindex -c 1 -q -w /dev/null
echo "# bench/query.sh $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg), $FILES files x $PKTS packets, $FLOWS flows, $(du -sb "$DIR" | cut -f1) bytes with indexes ($(cat "$DIR"/*.idx | wc -c) of index)"
# Warm the page cache once (both read the same files).
cat "$DIR"/*.pcap > /dev/null
now() { date +%s.%N; }
lr_all=""
td_all=""
r=0
while [ "$r" -lt "$ROUNDS" ]; do
    t0=$(now)
    n=$("$BIN" query "$DIR" "host $HOST" -q -w - | tcpdump -r - 2>/dev/null | wc -l)
    t1=$(now)
    m=$(for f in "$DIR"/*.pcap; do tcpdump -r "$f" -w - "host $HOST" 2>/dev/null | tcpdump -r - 2>/dev/null; done | wc -l)
    t2=$(now)
    lr=$(echo "$t1 - $t0" | bc)
    td=$(echo "$t2 - $t1" | bc)
    echo "round $r: linerate query $lr s ($n packets), tcpdump -r over the files $td s ($m packets)"
    lr_all="$lr_all $lr"
    td_all="$td_all $td"
    r=$((r + 1))
done
med() { printf '%s\n' $1 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
lm=$(med "$lr_all")
tm=$(med "$td_all")
echo "median: linerate query $lm s, tcpdump -r $tm s, ratio $(echo "scale=1; $tm / $lm" | bc)x"
