#!/usr/bin/env sh
# Builds a static runtimed (no libc: runs in an empty root or a distroless
# image) into $1 (default ./runtimed). Used by the Dockerfile and by
# TestStaticBinaryInEmptyRoot, so both build the same way.
set -eu
out=${1:-runtimed}
cd "$(dirname "$0")/.."
CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w -extldflags=-static' -o "$out" ./cmd/runtimed
