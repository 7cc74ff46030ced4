#!/usr/bin/env bash
# Builds the cargo-fuzz targets and runs each for N seconds (default 20).
# Uses a nightly toolchain when installed, else the pinned stable one with RUSTC_BOOTSTRAP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz@0.13.2
fi
cd fuzz
if rustup run nightly rustc --version >/dev/null 2>&1; then
  fuzz=(cargo +nightly fuzz)
else
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
fi
for t in $("${fuzz[@]}" list); do
  "${fuzz[@]}" build "$t"
  mkdir -p "corpus/$t"
  "${fuzz[@]}" run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 2>&1 | tail -n 3
done
