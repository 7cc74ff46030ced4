#!/usr/bin/env bash
# Installs and builds every peer tool the benchmarks compare linerate with, on a fresh Debian 12
# machine, with no network beyond the package mirror: the Debian packages (trafgen, tcpreplay,
# dpdk-testpmd and its virtual ports, argus, tshark, jq, tcpdump, nfdump, softflowd) and
# xdp-trafficgen/xdp-bench 1.6.3 built from the source tarball in ../shared/peers/ (Debian's
# xdp-tools 1.3.1 fails on this kernel). Then writes bench/out/peers.env, which every bench
# script reads to find them (a path given in the environment wins).
#
#   sudo bash bench/peers.sh [DIR]     (DIR: where xdp-tools is built, default /opt/linerate-peers)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || exec sudo bash "$0" "$@"
dir=${1:-/opt/linerate-peers}
install=${PEERS_INSTALL:-../shared/peers/install.sh}
[ -f "$install" ] || {
  echo "bench/peers.sh: $install not found: set PEERS_INSTALL to the peers' install.sh" >&2
  exit 1
}
bash "$install" "$dir"
# Peers that come from Debian alone (install.sh leaves them out).
extra=()
# stenographer: bench/record.sh's peer (its stenotype writer, server, stenoread and stenokeys)
for p in tcpdump nfdump softflowd stenographer stenographer-client wireshark-common jq curl; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || extra+=("$p")
done
if [ ${#extra[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${extra[@]}" >/dev/null
fi
src=$dir/xdp-tools-1.6.3
mkdir -p bench/out
cat > bench/out/peers.env <<ENV
# Written by bench/peers.sh on $(date -u +%FT%TZ): where the peers it built are.
XDP_TRAFFICGEN=\${XDP_TRAFFICGEN:-$src/xdp-trafficgen/xdp-trafficgen}
XDP_BENCH=\${XDP_BENCH:-$src/xdp-bench/xdp-bench}
XDP_DROP_OBJ=\${XDP_DROP_OBJ:-$src/lib/testing/xdp_drop.o}
ENV
missing=0
for t in trafgen tcpreplay dpdk-testpmd argus ra tshark jq tcpdump nfcapd softflowd stenotype stenoread capinfos \
  "$src/xdp-trafficgen/xdp-trafficgen" "$src/xdp-bench/xdp-bench"; do
  if command -v "$t" >/dev/null 2>&1 || [ -x "$t" ]; then
    printf '  %-60s ok\n' "$t"
  else
    printf '  %-60s MISSING\n' "$t"
    missing=1
  fi
done
echo "peers: bench/out/peers.env written"
exit $missing
