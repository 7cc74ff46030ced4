#!/usr/bin/env bash
# Installs the Debian 12 packages linerate needs (as root, or through sudo). Idempotent: packages
# already present are left alone, and nothing is fetched (and no root asked for) when all are.
#
#   bash scripts/setup.sh          what building linerate and running its main job need (README's
#                                  first command): a C compiler and make (LuaJIT, built in),
#                                  pkg-config, libpcap and librdkafka (linked)
#   bash scripts/setup.sh --tests  that, and the programs the tests compare with or drive (README's
#                                  second command, CI's .ci/run): tcpdump, tshark, argus, nfdump,
#                                  softflowd, ngrep, prometheus, clang/llvm/libbpf (the XDP
#                                  programs), iproute2 and ethtool (namespaces), zsh, fish and
#                                  man (completions and pages), git (the version's commit), and
#                                  Java 17 and Maven for the Kafka broker of the tests
#
# Rust itself comes from rustup (https://rustup.rs): rust-toolchain.toml names the version, and
# cargo installs it at the first build.
set -euo pipefail
tests=0
for a in "$@"; do
  case "$a" in
    --tests) tests=1 ;;
    -h | --help) sed -n '2,/^[^#]/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    *) echo "setup.sh: unknown argument $a (--tests, or none)" >&2; exit 2 ;;
  esac
done
# Rust is the user's, not root's: said once, before any sudo (which runs this script again).
if [ -z "${SUDO_USER:-}" ] && ! command -v cargo >/dev/null; then
  echo "setup: no cargo on the PATH: install Rust with rustup (https://rustup.rs); the version is rust-toolchain.toml's" >&2
fi
pkgs=(gcc libc6-dev make pkg-config libpcap-dev librdkafka-dev)
if [ "$tests" = 1 ]; then
  pkgs+=(iproute2 ethtool tcpdump tshark clang llvm libbpf-dev nfdump argus-server argus-client
    prometheus softflowd ngrep zsh fish man-db git curl)
  # The Kafka broker of the tests (scripts/kafka.sh) runs on Java 17 or later and is fetched with
  # Maven: installed only when no such java or mvn is on the PATH already.
  java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
  if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
    pkgs+=(openjdk-17-jre-headless)
  fi
  command -v mvn >/dev/null || pkgs+=(maven)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" != 0 ]; then
  # Installing needs root: re-run through sudo, only when something is missing (a user whose
  # packages are all there needs neither root nor sudo).
  if ! command -v sudo >/dev/null; then
    echo "setup: missing Debian packages (${missing[*]}): install them as root (apt-get install ${missing[*]}), or run this script as root" >&2
    exit 1
  fi
  exec sudo bash "$0" "$@"
fi
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # tshark asks whether non-root users may capture; answer no without a prompt.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: Debian packages present (${pkgs[*]})"
