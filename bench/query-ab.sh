#!/bin/sh
# A/B of `linerate query DIR 'host X'` between two builds (say the previous release build and
# this one), interleaved round by round with `tcpdump -r` over the same files, every run shown,
# medians at the end. Each build indexes its own copy of the directory (hard links to the same
# captures), so two index formats can be compared. Run by hand, never in CI.
#
# usage: bench/query-ab.sh A_BIN B_BIN [FILES [PACKETS_PER_FILE [ROUNDS]]]    (FLOWS=N)
# The captures are bench/query.sh's: 64 B frames from bench/mkpcap.py, FLOWS flows (100'000
# unless said); the host 81.48.57.1 is 1 packet in FLOWS, spread evenly over each file.
set -eu
A=$1
B=$2
FILES=${3:-4}
PKTS=${4:-1000000}
ROUNDS=${5:-5}
FLOWS=${FLOWS:-100000}
HOST=81.48.57.1
DIR=$(mktemp -d /tmp/lr-bench-query-ab.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
mkdir "$DIR/a" "$DIR/b"
i=0
while [ "$i" -lt "$FILES" ]; do
    f=20231114T221320.00000${i}Z-w$i.pcap
    python3 "$(dirname "$0")/mkpcap.py" "$DIR/a/$f" "$PKTS" "$FLOWS"
    ln "$DIR/a/$f" "$DIR/b/$f"
    i=$((i + 1))
done
"$A" query "$DIR/a" --reindex -c 1 -q -w /dev/null
"$B" query "$DIR/b" --reindex -c 1 -q -w /dev/null
echo "# bench/query-ab.sh $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg), $FILES files x $PKTS packets, $FLOWS flows, $(du -sbL "$DIR/a" | cut -f1) bytes in a with A's indexes ($(cat "$DIR"/a/*.idx | wc -c) of index), B's indexes $(cat "$DIR"/b/*.idx | wc -c) bytes"
cat "$DIR"/a/*.pcap > /dev/null
cpu() { awk '{print $1 + $2}' "$1"; }
T=$DIR/time
a_all=""
b_all=""
t_all=""
r=0
while [ "$r" -lt "$ROUNDS" ]; do
    /usr/bin/time -f "%U %S %e" -o "$T.a" "$A" query "$DIR/a" -q -w "$DIR/out.a" "host $HOST"
    /usr/bin/time -f "%U %S %e" -o "$T.b" "$B" query "$DIR/b" -q -w "$DIR/out.b" "host $HOST"
    # tcpdump -r's output is only timed (the files' streams end to end are not one pcap).
    /usr/bin/time -f "%U %S %e" -o "$T.t" sh -c "for f in '$DIR'/a/*.pcap; do tcpdump -r \"\$f\" -w - 'host $HOST' 2>/dev/null; done > '$DIR/out.t'"
    na=$(tcpdump -r "$DIR/out.a" 2>/dev/null | wc -l)
    nb=$(tcpdump -r "$DIR/out.b" 2>/dev/null | wc -l)
    echo "round $r: A $(awk '{print $3}' "$T.a") s wall $(cpu "$T.a") s cpu ($na packets); B $(awk '{print $3}' "$T.b") s wall $(cpu "$T.b") s cpu ($nb packets); tcpdump -r $(awk '{print $3}' "$T.t") s wall $(cpu "$T.t") s cpu"
    a_all="$a_all $(cpu "$T.a")"
    b_all="$b_all $(cpu "$T.b")"
    t_all="$t_all $(cpu "$T.t")"
    r=$((r + 1))
done
med() { printf '%s\n' $1 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "median cpu: A $(med "$a_all") s, B $(med "$b_all") s, tcpdump -r $(med "$t_all") s"
