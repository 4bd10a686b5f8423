#!/bin/sh
# Runs each fuzz target of proptest for FUZZTIME (default 30s).
# Usage: proptest/fuzz.sh            FUZZTIME=5m proptest/fuzz.sh
set -eu
cd "$(dirname "$0")/.."
for target in FuzzDecode FuzzDecodeParams; do
	echo "== $target (${FUZZTIME:-30s})"
	go test -run='^$' -fuzz="^${target}\$" -fuzztime="${FUZZTIME:-30s}" ./proptest/
done
