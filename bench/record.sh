#!/usr/bin/env bash
# bench/record.sh: full-packet recorders side by side, same traffic, same run: Google's
# Stenographer (Debian `stenographer`: its `stenotype` writer, its server and `stenoread`),
# tcpdump's own rotation (`-w F -C 100 -W 10`) and `linerate record`, then the time to find a
# rare host in about 1 GB of recorded data (`linerate query`, `tcpdump -r` over every file,
# `stenoread`). By hand, as root, never in CI.
#
#   sudo bash bench/record.sh                 # capture ladder + query, Markdown on stdout
#   sudo ONLY=capture bash bench/record.sh    # or ONLY=query
#   env: SECS (4, per step), RATES64 (pps steps at 64 B), RATESIMIX (pps steps at IMIX),
#        RECORDERS ("stenotype tcpdump tcpdump-B64M linerate linerate-t2"), QUERY_MB (1000),
#        QUERY_RATE (100kpps, IMIX), RARE (200 packets at 100 pps), STENO_BLOCKS (64: its ring,
#        in MB, as tcpdump -B 65536), DIR (/var/tmp: where the files go; a disk, not tmpfs),
#        LR (the linerate binary; default target/release/linerate, built), KEEP=1 keeps the files.
#
# Topology: namespaces A and B joined by a veth pair (vA, vB); `linerate gen` sends from A on
# core 0, the recorder under test listens on vB in B on core 1 (veth's receive side runs on the
# sender's core: see /work/shared/PEERS.md). Per step: offered = vB's rx_packets + tx_packets
# (B's ICMP port unreachables are captured too) over the step;
# written = packets in the recorder's files (capinfos for pcap files; stenotype's files are
# TPACKET_V3 blocks, not pcap: the packets its indexer stored, its "Stored N" log lines); loss =
# offered - written; CPU = on-CPU time of the recorder process (all its threads, from
# /proc/PID/task/*/schedstat) over the step / written packets.
#
# Stenographer recipe (1.0.1, Debian bookworm; what worked here):
# - stenotype alone: `stenotype --iface=vB --dir=D/ --threads=1 --seccomp=none --blocks=64
#   --blockage_sec=1 --fileage_sec=60 -v`, with D/PKT0 and D/IDX0 made first (it writes
#   packets to PKT<thread>/ and indexes to IDX<thread>/; 1.0.1 has no --index_dir). It keeps
#   the open file hidden (".MICROS") and renames it when it rotates. On SIGINT it hands the last
#   index to its index thread (logged "Stored N") but then hangs in its final flush until its
#   watchdog aborts it (2 min): we SIGINT, wait for the last "Stored" line, then SIGKILL.
#   `--uid/--gid` take names, not numbers.
# - the server: a config whose Threads[0] PacketsDirectory/IndexDirectory are ours, Interface
#   vB, Host 127.0.0.1, Port P, CertPath ours, Flags ["--seccomp=none", ...]; certificates with
#   `STENOGRAPHER_CONFIG=cfg stenokeys stenographer stenographer` (run in CertPath); started as
#   user stenographer inside B (`ip netns exec B runuser -u stenographer -- stenographer
#   --config=cfg --syslog=false`): it makes a 0700 temp dir of symlinks and runs stenotype
#   there, so as root stenotype (after its own privilege drop) cannot open its files. Its
#   directories must belong to stenographer. `--fileage_sec` must be >= `--blockage_sec`
#   (default 10) or stenotype aborts at once and the server gives up. Files become queryable
#   when stenotype renames them (rotation) and the server's next scan finds them (~15 s).
# - query: `STENOGRAPHER_CONFIG=cfg ip netns exec B stenoread 'host X' -w out.pcap` (stenoread
#   wraps curl with the client certificate and pipes to tcpdump; it needs jq).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
[ "$(id -u)" = 0 ] || { echo "bench/record.sh: needs root (namespaces, AF_PACKET)" >&2; exit 2; }
for t in stenotype stenographer stenoread stenokeys tcpdump capinfos jq curl; do
  command -v "$t" >/dev/null || { echo "bench/record.sh: $t missing: apt-get install -y stenographer tcpdump wireshark-common jq curl" >&2; exit 2; }
done
SETV=""   # the variables the caller set, for the Command line of the report
for v in SECS RATES64 RATESIMIX RECORDERS QUERY_MB QUERY_RATE RARE STENO_BLOCKS ONLY; do
  [ -n "${!v+x}" ] && SETV+=$(printf ' %s="%s"' "$v" "${!v}")
done
ONLY=${ONLY:-capture query}
SECS=${SECS:-4}
RATES64=${RATES64:-100k 200k 400k 600k 800k 1M}
RATESIMIX=${RATESIMIX:-50k 100k 200k 300k 400k}
RECORDERS=${RECORDERS:-stenotype tcpdump tcpdump-B64M linerate linerate-t2}
QUERY_MB=${QUERY_MB:-1000}
QUERY_RATE=${QUERY_RATE:-100k}
RARE=${RARE:-200 100}
STENO_BLOCKS=${STENO_BLOCKS:-64}
if [ -z "${LR:-}" ]; then
  cargo build --release -q -p linerate-cli
  LR=$PWD/target/release/linerate
fi
HAVE_RECORD=0 HAVE_QUERY=0
"$LR" record --help >/dev/null 2>&1 && HAVE_RECORD=1
"$LR" query --help >/dev/null 2>&1 && HAVE_QUERY=1

W=$(mktemp -d "${DIR:-/var/tmp}/linerate-record-bench.XXXXXX")
chmod 755 "$W"
A=lrrA$$ B=lrrB$$
PGIDS=()
cleanup() {
  local g
  for g in "${PGIDS[@]}"; do kill -KILL -- -"$g" 2>/dev/null || true; done
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
  if [ -z "${KEEP:-}" ]; then rm -rf -- "$W"; else echo "bench/record.sh: files kept in $W" >&2; fi
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add vA netns "$A" type veth peer name vB netns "$B"
ip -n "$A" link set vA up; ip -n "$B" link set vB up
ip -n "$A" link set lo up; ip -n "$B" link set lo up
ip -n "$A" addr add 198.18.0.1/24 dev vA; ip -n "$B" addr add 198.18.0.2/24 dev vB
ip netns exec "$A" ethtool -K vA sg off >/dev/null 2>&1 || true
MACB=$(ip -n "$B" -o link show vB | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)

# packets through vB both ways: the recorders keep what B sends too (its ICMP port unreachables)
rxpk() { ip netns exec "$B" sh -c 'echo $(( $(cat /sys/class/net/vB/statistics/rx_packets) + $(cat /sys/class/net/vB/statistics/tx_packets) ))'; }
# CPU time of a process in ns: the sum of its threads' /proc/PID/task/*/schedstat (ns, not the
# 10 ms ticks of /proc/PID/stat, which at a few hundred thousand packets a step are 25-50 ns a
# packet); the recorders' threads live through the step
cpu_of() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s+=$1} END{print s+0}'; }
# gen SIZE RATE SECONDS [extra flags]: from A on core 0, to vB's MAC (up vB's stack to a closed
# UDP port: the recorders see every frame; the stack's cost lands on core 0 with the sender)
gen() {
  local size=$1 rate=$2 secs=$3
  shift 3
  ip netns exec "$A" taskset -c 0 "$LR" gen -o afpacket:vA --size "$size" --rate "${rate}pps" -t "${secs}s" \
    --dst-mac "$MACB" --src-ip 198.18.0.1 --dst-ip 198.18.0.2 -q "$@" >/dev/null 2>"$W/gen.err" || { echo "bench/record.sh: gen failed:" >&2; cat "$W/gen.err" >&2; return 1; }
}
# start NAME DIR: the recorder NAME in B on core 1, writing in DIR; sets PID
start() {
  local name=$1 d=$2
  case $name in
    stenotype)
      mkdir -p "$d/PKT0" "$d/IDX0"
      chown -R stenographer:stenographer "$d"
      setsid ip netns exec "$B" taskset -c 1 stenotype --iface=vB --dir="$d/" --threads=1 --seccomp=none \
        --blocks="$STENO_BLOCKS" --aiops=$((STENO_BLOCKS / 2)) --blockage_sec=1 --fileage_sec=60 \
        --uid=stenographer --gid=stenographer -v -v >"$d.log" 2>&1 &
      ;;
    tcpdump)
      setsid ip netns exec "$B" taskset -c 1 tcpdump -i vB -n -Z root -w "$d/f.pcap" -C 100 -W 10 >"$d.log" 2>&1 &
      ;;
    tcpdump-B64M)
      setsid ip netns exec "$B" taskset -c 1 tcpdump -i vB -n -Z root -B 65536 -w "$d/f.pcap" -C 100 -W 10 >"$d.log" 2>&1 &
      ;;
    linerate)
      setsid ip netns exec "$B" taskset -c 1 "$LR" record -i afpacket:vB --file-size 100MB "$d" --json >"$d.log" 2>&1 &
      ;;
    linerate-t2)
      setsid ip netns exec "$B" taskset -c 1 "$LR" record -i afpacket:vB --threads 2 --file-size 100MB "$d" --json >"$d.log" 2>&1 &
      ;;
  esac
  PID=$!
  PGIDS+=("$PID")
}
# stop NAME PID: ends the recorder; stenotype hangs in its last flush after SIGINT (see above)
stop() {
  local name=$1 pid=$2 i n0
  n0=$(grep -c 'Stored [0-9]* with' "$LOG" || true)
  kill -INT "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    [ "$name" = stenotype ] && [ "$(grep -c 'Stored [0-9]* with' "$LOG" || true)" -gt "$n0" ] && break
    sleep 0.1
  done
  kill -KILL -- -"$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
# written NAME DIR: packets in the recorder's files
written() {
  local name=$1 d=$2
  case $name in
    stenotype) awk '/Stored [0-9]+ with/{for(i=1;i<=NF;i++) if($i=="Stored") s+=$(i+1)} END{print s+0}' "$d.log" ;;
    *) find "$d" -name '*.pcap*' ! -name '*.idx' -type f -print0 | xargs -0 -r capinfos -T -r -c 2>/dev/null |
      awk -F'\t' '{s+=$2} END{print s+0}' ;;
  esac
}

# capture SIZE RATES: the ladder, one row per recorder and rate
declare -A BEST CPUBEST NS LOSSY
capture() {
  local size=$1 rates=$2 name rate d r0 r1 c0 c1 off wr loss nspp
  echo
  echo "### Capture on veth, $size B frames (gen on core 0 in A, recorder on core 1 in B, ${SECS} s per step)"
  echo
  echo "| recorder | step (gen --rate) | offered pps | offered | written | lost | loss % | CPU ns/pkt |"
  echo "|---|---|---|---|---|---|---|---|"
  for name in $RECORDERS; do
    case $name in linerate*) [ $HAVE_RECORD = 1 ] || { echo "| $name | (no \`linerate record\` in this build) | | | | | | |"; continue; } ;; esac
    BEST[$name-$size]=0 NS[$name-$size]="" LOSSY[$name-$size]=0
    for rate in $rates; do
      d=$W/cap-$name-$size-$rate
      mkdir -p "$d"
      LOG=$d.log
      start "$name" "$d"
      sleep 2   # the ring set up (stenotype maps and locks its blocks)
      r0=$(rxpk); c0=$(cpu_of "$PID")
      gen "$size" "$rate" "$SECS"
      sleep 2   # the last blocks retire (stenotype: --blockage_sec=1)
      r1=$(rxpk); c1=$(cpu_of "$PID")
      stop "$name" "$PID"
      off=$((r1 - r0)); wr=$(written "$name" "$d")
      loss=$((off - wr)); [ "$loss" -lt 0 ] && loss=0
      nspp=$(python3 -c "print(round(($c1-$c0)/max(1,$wr)))")
      echo "| $name | $rate | $(python3 -c "print(round($off/$SECS))") | $off | $wr | $loss | $(python3 -c "print(f'{100*$loss/max(1,$off):.3f}')") | $nspp |"
      if [ "$loss" = 0 ] && [ "$off" -gt 0 ]; then
        [ $((off / SECS)) -gt "${BEST[$name-$size]}" ] && { BEST[$name-$size]=$((off / SECS)); CPUBEST[$name-$size]=$nspp; }
        NS[$name-$size]+=" $nspp"
      else
        LOSSY[$name-$size]=1
      fi
      rm -rf -- "$d"
    done
  done
  echo
  echo "Highest lossless rate at $size B: the most offered in a step that lost nothing; \"(no loss)\": no"
  echo "step lost a packet, so the generator, not the recorder, set the figure. Packets per CPU-second:"
  echo "1e9 / the median CPU ns per packet over the lossless steps (what one core of the recorder's"
  echo "process would carry, the recorder's own cost; the kernel's share on the sender's core is not in it)."
  echo
  echo "| recorder | lossless pps | CPU ns/pkt there | vs stenotype | packets per CPU-second | vs stenotype |"
  echo "|---|---|---|---|---|---|"
  declare -A PPC
  for name in $RECORDERS; do
    [ -n "${BEST[$name-$size]:-}" ] || continue
    PPC[$name]=$(python3 -c "import statistics as s; v=[float(x) for x in '${NS[$name-$size]}'.split()]; print(round(1e9/s.median(v)) if v else 'nan')")
    echo "| $name | ${BEST[$name-$size]}$([ "${LOSSY[$name-$size]}" = 0 ] && echo ' (no loss)') | ${CPUBEST[$name-$size]:-n/a} | $(python3 -c "print(f'{${BEST[$name-$size]}/max(1,${BEST[stenotype-$size]:-0}):.2f}×')") | ${PPC[$name]} | $(python3 -c "print(f'{float(\"${PPC[$name]}\")/float(\"${PPC[stenotype]:-nan}\"):.2f}×')" 2>/dev/null || echo n/a) |"
  done
  goal "record: lossless capture rate, $size B, 1 writer" "${BEST[linerate-$size]:-nan}" "stenotype --threads=1" "${BEST[stenotype-$size]:-nan}" 2 pps
  goal "record: lossless capture rate, $size B, 1 writer" "${BEST[linerate-$size]:-nan}" "tcpdump -w -C 100 -W 10" "${BEST[tcpdump-$size]:-nan}" - pps
  goal "record: packets per CPU-second, $size B" "${PPC[linerate]:-nan}" "stenotype --threads=1" "${PPC[stenotype]:-nan}" 2 pps
}

# query: about QUERY_MB of IMIX recorded by the three at once (same packets), a rare host
# (RARE = count rate: 200 packets at 100 pps, 10.77.0.1, in the middle of the run) found by each
query() {
  local rare_n rare_r d tq tt ts tl
  read -r rare_n rare_r <<<"$RARE"
  local rate=${QUERY_RATE%k}000
  echo
  echo "### Rare host in ~$QUERY_MB MB: IMIX sent at up to ${QUERY_RATE}pps until tcpdump's files hold $QUERY_MB MB; $rare_n packets of 10.77.0.1 at ${rare_r} pps when they hold half"
  echo
  d=$W/q
  mkdir -p "$d/pkt" "$d/idx" "$d/certs" "$d/tcpdump" "$d/linerate"
  chown -R stenographer:stenographer "$d/pkt" "$d/idx"
  chmod 755 "$d" "$d/certs"
  local port=$((20000 + $$ % 10000))
  cat >"$d/config" <<EOF
{ "Threads": [ { "PacketsDirectory": "$d/pkt", "IndexDirectory": "$d/idx", "DiskFreePercentage": 1, "MaxDirectoryFiles": 30000 } ],
  "StenotypePath": "$(command -v stenotype)", "Interface": "vB", "Port": $port, "Host": "127.0.0.1",
  "Flags": ["--seccomp=none", "--blocks=256", "--blockage_sec=1", "--fileage_sec=10"],
  "CertPath": "$d/certs" }
EOF
  chmod 644 "$d/config"
  (cd "$d/certs" && STENOGRAPHER_CONFIG=$d/config stenokeys stenographer stenographer >/dev/null 2>&1)
  setsid ip netns exec "$B" runuser -u stenographer -- stenographer --config="$d/config" --syslog=false >"$d/server.log" 2>&1 &
  local spid=$!; PGIDS+=("$spid")
  setsid ip netns exec "$B" tcpdump -i vB -n -Z root -B 65536 -w "$d/tcpdump/f.pcap" -C 100 -W 100 >"$d/tcpdump.log" 2>&1 &
  local tpid=$!; PGIDS+=("$tpid")
  local lpid=
  if [ $HAVE_RECORD = 1 ]; then
    setsid ip netns exec "$B" "$LR" record -i afpacket:vB "$d/linerate" --file-size 100MB >"$d/linerate.log" 2>&1 &
    lpid=$!; PGIDS+=("$lpid")
  fi
  sleep 4
  local r0; r0=$(rxpk)
  local s0 secs
  s0=$(date +%s)
  gen imix "$rate" 3600 &
  local gpid=$!
  tmb() { du -sm "$d/tcpdump" | cut -f1; }
  while [ "$(tmb)" -lt $((QUERY_MB / 2)) ] && kill -0 "$gpid" 2>/dev/null; do sleep 1; done
  ip netns exec "$A" "$LR" gen -o afpacket:vA --size 64 --rate "${rare_r}pps" -c "$rare_n" --dst-mac "$MACB" \
    --src-ip 10.77.0.1 --dst-ip 198.18.0.2 -q >/dev/null 2>&1
  while [ "$(tmb)" -lt "$QUERY_MB" ] && kill -0 "$gpid" 2>/dev/null; do sleep 1; done
  # the generator is `ip netns exec ... taskset ... linerate gen` exec'd in turn: $! is linerate
  pkill -INT -P "$gpid" 2>/dev/null || true
  kill -INT "$gpid" 2>/dev/null || true
  wait "$gpid" || true
  secs=$(( $(date +%s) - s0 ))
  sleep 2
  local r1; r1=$(rxpk)
  kill -INT "$tpid" 2>/dev/null || true
  [ -n "$lpid" ] && kill -INT "$lpid" 2>/dev/null || true
  wait "$tpid" 2>/dev/null || true
  [ -n "$lpid" ] && { wait "$lpid" 2>/dev/null || true; }
  # stenotype renames its open file at the next rotation (--fileage_sec=10); the server picks it
  # up on its next scan: wait until stenoread's count stops changing
  local cur i
  for i in $(seq 1 20); do
    sleep 3
    STENOGRAPHER_CONFIG=$d/config ip netns exec "$B" stenoread 'host 10.77.0.1' -w "$d/out.pcap" >/dev/null 2>&1 || true
    cur=$(capinfos -T -r -c "$d/out.pcap" 2>/dev/null | awk -F'\t' '{print $2+0}')
    [ "${cur:-0}" -ge "$rare_n" ] && break
  done
  sync
  local tsize lsize isize ssize xsize
  tsize=$(du -sb "$d/tcpdump" | cut -f1)
  ssize=$(du -sbL "$d/pkt" | cut -f1); xsize=$(du -sbL "$d/idx" | cut -f1)
  echo "- offered: $((r1 - r0)) packets in $secs s; tcpdump files: $(ls "$d/tcpdump" | wc -l), $((tsize / 1000000)) MB"
  echo "- stenographer: packet files $((ssize / 1000000)) MB, index files $((xsize / 1000)) kB ($(python3 -c "print(f'{100*$xsize/max(1,$ssize):.2f}')") % of its data)"
  if [ -n "$lpid" ]; then
    lsize=$(find "$d/linerate" -type f ! -name '*.idx' ! -name '.*' -printf '%s\n' | awk '{s+=$1} END{print s+0}')
    isize=$(find "$d/linerate" -type f -name '*.idx' -printf '%s\n' | awk '{s+=$1} END{print s+0}')
    echo "- linerate record: $(find "$d/linerate" -type f ! -name '*.idx' ! -name '.*' | wc -l) files, $((lsize / 1000000)) MB; indexes $((isize / 1000)) kB ($(python3 -c "print(f'{100*$isize/max(1,$lsize):.3f}')") % of the data)"
  fi
  echo
  echo "Each query 3 times, files in the page cache, median wall time; answer = packets out:"
  echo
  echo "| query | median s | runs s | packets |"
  echo "|---|---|---|---|"
  # t3 NAME CMD: runs CMD 3 times, prints a row, MED = the median wall time; the answer's
  # packets are counted in $d/out.pcap after the last run
  t3() {
    local name=$1 ts=() s e n
    shift
    for _ in 1 2 3; do
      rm -f "$d/out.pcap"
      s=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s.%N)
      ts+=("$(python3 -c "print(f'{$e-$s:.3f}')")")
    done
    n=$(capinfos -T -r -c "$d/out.pcap" 2>/dev/null | awk -F'\t' '{print $2+0}')
    MED=$(printf '%s\n' "${ts[@]}" | sort -n | sed -n 2p)
    echo "| $name | $MED | ${ts[*]} | ${n:-0} |"
  }
  # perfile DIR GLOB: tcpdump -r over every file, one -w each, merged in time order
  perfile() {
    local f
    rm -f "$d"/o-*
    for f in "$1"/$2; do tcpdump -r "$f" -w "$d/o-${f##*/}" 'host 10.77.0.1' || return 1; done
    mergecap -w "$d/out.pcap" "$d"/o-*
    rm -f "$d"/o-*
  }
  cat "$d"/tcpdump/* >/dev/null
  t3 "\`tcpdump -r F 'host 10.77.0.1'\` over tcpdump's files, one by one" perfile "$d/tcpdump" '*'
  tt=$MED
  t3 "\`stenoread 'host 10.77.0.1' -w out.pcap\` (HTTPS to its server)" \
    env STENOGRAPHER_CONFIG="$d/config" ip netns exec "$B" stenoread 'host 10.77.0.1' -w "$d/out.pcap"
  ts=$MED
  if [ $HAVE_QUERY = 1 ] && [ -n "$lpid" ]; then
    cat "$d"/linerate/* >/dev/null
    t3 "\`linerate query -w out.pcap DIR 'host 10.77.0.1'\`" "$LR" query -w "$d/out.pcap" "$d/linerate" 'host 10.77.0.1'
    tq=$MED
    t3 "\`tcpdump -r F 'host 10.77.0.1'\` over linerate's files, one by one" perfile "$d/linerate" '*.pcap'
    tl=$MED
    goal "record: rare host in ~${QUERY_MB} MB, queries/s" "$(python3 -c "print(1/$tq)")" "tcpdump -r over the files" "$(python3 -c "print(1/$tl)")" 10 "/s"
    goal "record: rare host in ~${QUERY_MB} MB, queries/s" "$(python3 -c "print(1/$tq)")" "stenoread" "$(python3 -c "print(1/$ts)")" 1 "/s"
    echo
    echo "linerate query's own counters:"
    echo
    "$LR" query -w "$d/out.pcap" "$d/linerate" 'host 10.77.0.1' 2>&1 | tail -5 | sed 's/^/    /'
  else
    echo "| \`linerate query\` | (not in this build) | | |"
  fi
  : "$tt"
  if [ -n "$lpid" ]; then
    # data/index against 20 (= index at 5 % of the data): ratio >= 1 meets "index <= 5 %"
    goal "record: data ÷ index, IMIX" "$(python3 -c "print($lsize/max(1,$isize))")" "5 % limit" 20 1 "×"
  fi
}

echo "## Recorders (bench/record.sh, $(date -u +%Y-%m-%dT%H%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD))"
echo
echo "Command: \`sudo$SETV bash bench/record.sh\`; stenotype $(dpkg-query -W -f='${Version}' stenographer 2>/dev/null), $(tcpdump --version 2>&1 | head -1)"
case " $ONLY " in *" capture "*)
  capture 64 "$RATES64"
  capture imix "$RATESIMIX"
  ;;
esac
case " $ONLY " in *" query "*) query ;; esac
echo
echo "(load at the end $(cut -d' ' -f1-3 /proc/loadavg))"
