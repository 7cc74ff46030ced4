#!/bin/sh
# Lists every function over its length limit (command-line crate 120 lines, library 200)
# and fails when one is not named in scripts/long-fns-allowed.txt.
# With N: also lists every function of both crates over N lines, longest first.
# Usage: scripts/fn-lengths.sh [N]   (from anywhere in the repository)
set -e
cd "$(dirname "$0")/.."
if [ -n "$1" ]; then
    export LINERATE_FN_LIST="$1"
fi
exec cargo test -q -p linerate-cli --test fn_lengths -- --nocapture --test-threads=1
