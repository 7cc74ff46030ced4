#!/usr/bin/env bash
# Installs what linerate needs to build, run and test on Debian 12 (as root, or through sudo).
# Idempotent: packages already present are left alone.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  # Packages need root: re-run through sudo when not root.
  exec sudo bash "$0" "$@"
fi
pkgs=(libpcap-dev pkg-config iproute2 ethtool tcpdump tshark clang llvm libbpf-dev nfdump argus-server argus-client
  librdkafka-dev prometheus softflowd ngrep)
# The Kafka broker of the tests (scripts/kafka.sh) runs on Java 17 or later and is fetched with
# Maven: installed only when no such java or mvn is on the PATH already.
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  pkgs+=(openjdk-17-jre-headless)
fi
command -v mvn >/dev/null || pkgs+=(maven)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # tshark asks whether non-root users may capture; answer no without a prompt.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: Debian packages present (${pkgs[*]})"
