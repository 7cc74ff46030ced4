#!/usr/bin/env bash
# `count -i F -w OUT` of every capture in a directory by two builds of linerate: the files they
# write must be byte for byte the same (a classic pcap input read in place is written from its
# mapping, no copy, where its records are already what the writer would write; this checks
# that nothing else changed). Variants: plain, a filter, -c, -s, -U, pcapng output.
#
#   bash scripts/pcap-write-check.sh A B [DIR]     (DIR: ../shared/corpus by default)
#
# Prints each difference and a summary; exit status 1 if any.
set -uo pipefail
A=$1 B=$2
DIR=${3:-$(dirname "$0")/../../shared/corpus}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
n=0 bad=0
while IFS= read -r f; do
  for v in plain filter count snap ubuf ng; do
    case $v in
      plain) args=(); ext=pcap;;
      filter) args=(udp or icmp); ext=pcap;;
      count) args=(-c 3); ext=pcap;;
      snap) args=(-s 64); ext=pcap;;
      ubuf) args=(-U); ext=pcap;;
      ng) args=(); ext=pcapng;;
    esac
    "$A" count -q -i "$f" -w "$T/a.$ext" "${args[@]}" >"$T/a.out" 2>&1; ra=$?
    "$B" count -q -i "$f" -w "$T/b.$ext" "${args[@]}" >"$T/b.out" 2>&1; rb=$?
    n=$((n + 1))
    if [ "$ra" != "$rb" ]; then
      echo "exit $ra vs $rb: $v $f"; bad=$((bad + 1))
    elif [ -e "$T/a.$ext" ] || [ -e "$T/b.$ext" ]; then
      if [ "$ext" = pcapng ]; then
        # pcapng holds the writer's own times (statistics): compare what tshark reads instead
        a=$(tshark -r "$T/a.$ext" -T fields -e frame.time_epoch -e frame.len -e frame.cap_len -e frame.protocols 2>&1 | md5sum)
        b=$(tshark -r "$T/b.$ext" -T fields -e frame.time_epoch -e frame.len -e frame.cap_len -e frame.protocols 2>&1 | md5sum)
        [ "$a" = "$b" ] || { echo "differ: $v $f"; bad=$((bad + 1)); }
      elif ! cmp -s "$T/a.$ext" "$T/b.$ext"; then
        echo "differ: $v $f"; bad=$((bad + 1))
      fi
    fi
    rm -f "$T/a.$ext" "$T/b.$ext"
  done
done < <(find "$DIR" -type f \( -name '*.pcap' -o -name '*.pcapng' -o -name '*.cap' \) | sort)
echo "$n runs, $bad differences"
[ "$bad" = 0 ]
