#!/usr/bin/env bash
# Runs every check of the project: formatting, lints, the loom model of the ring, the fuzz
# targets (built and run briefly), and the unit and integration tests (last).
# Tests that need root or network namespaces skip with a reason unless LINERATE_REQUIRE_PRIV=1,
# under which a skip is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

echo "== rustfmt"
cargo fmt --all -- --check

echo "== clippy"
cargo clippy --workspace --all-targets --release -- -D warnings

echo "== rustdoc of the library (no warnings: broken links fail)"
RUSTDOCFLAGS="-D warnings" cargo doc -p linerate --no-deps --quiet

echo "== loom models of the rings (SPSC; the cluster's lending queue: lend/release/reclaim, fan-out, a consumer dying mid-batch, a consumer taken back while alive, a transmit lane resumed by another producer)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p linerate --lib loom

echo "== fuzz targets (build, then ${LINERATE_FUZZ_SECONDS:-20} s each)"
bash scripts/fuzz.sh "${LINERATE_FUZZ_SECONDS:-20}"

echo "== release build (the binary and liblinerate_pcap.so beside it, as users get them: the tests of libpcap programs preload it)"
cargo build --workspace --release

echo "== unit and integration tests"
log=$(mktemp)
# A test that cannot run here (no root, no tcpdump, ...) returns early and so counts as passed
# for cargo; linerate_test_support::skip also writes it to this file, so that the closing line
# counts it as skipped instead.
skips=$(mktemp)
export LINERATE_SKIP_LOG=$skips
trap 'rm -f "$log" "$skips"' EXIT
set +e
# The tests check that every stop signal stops every tool, also one that comes before main
# (the signal's default action), and that a SIGHUP ignored at start stays ignored (nohup): they
# start from the default actions even when this script runs under nohup (SIGHUP ignored) or as
# a background job of a non-interactive shell (SIGINT and SIGQUIT ignored), which every child
# would inherit; a signal ignored before main is lost, whatever the tool does (coreutils' env).
env --default-signal=HUP,INT,QUIT,TERM,USR1 cargo test --workspace --release 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if [ -s "$skips" ]; then
  echo "== skipped tests"
  sort -u "$skips"
fi
# One closing line for the whole run, summed over every test binary; skipped tests are taken
# out of cargo's "passed". Ignored tests are the entries of child processes that a test starts
# by running its own binary again (xdp_veth's crash child): counted apart, as ignored.
awk -v s="$(awk -F": " '{ print $2 }' "$skips" | sort -u | wc -l)" '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed;?$/) p += $(i-1); if ($(i) ~ /^failed;?$/) f += $(i-1); if ($(i) ~ /^ignored;?$/) g += $(i-1) } }
     END { printf "tests: %d passed, %d failed, %d skipped", p - s, f, s; if (g) printf " (%d ignored: child-process entries, run by the tests that start them)", g; printf "\n" }' "$log"
exit "$rc"
