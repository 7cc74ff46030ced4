#!/bin/sh
# Lists every function over its length limit (command-line crate 120 lines, library 200)
# and fails when one is not named in scripts/long-fns-allowed.txt.
# Usage: scripts/fn-lengths.sh   (from anywhere in the repository)
set -e
cd "$(dirname "$0")/.."
exec cargo test -q -p linerate-cli --test fn_lengths -- --nocapture --test-threads=1
