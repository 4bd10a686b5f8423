#!/usr/bin/env bash
# Side-by-side benchmark of runtimed and the reference Codex exec-server
# (npm @openai/codex@0.135.0), one after the other on this machine.
# Usage: scripts/bench-compare.sh [RUNS]   (results in bench-results/)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
ref_dir=${REF_DIR:-$HOME/.cache/runtimed-ref}
out=bench-results
mkdir -p "$out" "$ref_dir/codex-home"

go build -o "$out/runtimed" ./cmd/runtimed
if [ ! -x "$ref_dir/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex" ]; then
  (cd "$ref_dir" && npm install --no-audit --no-fund @openai/codex@0.135.0 >/dev/null)
fi
ref="$ref_dir/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
export CODEX_HOME="$ref_dir/codex-home"
bench="$out/runtimed bench --runs $runs"

echo "== runtimed, websocket"
$bench --spawn "$out/runtimed serve --log-level warn" | tee "$out/runtimed-ws.txt"
echo "== runtimed, websocket, client not decoding (server capacity)"
$bench --spawn "$out/runtimed serve --log-level warn" --only b --no-decode | tee "$out/runtimed-ws-nodecode.txt"
echo "== runtimed, stdio"
$bench --spawn "$out/runtimed serve --log-level warn --listen stdio://" --stdio --only abcde | tee "$out/runtimed-stdio.txt"
echo "== reference, websocket"
$bench --spawn "$ref exec-server --listen ws://127.0.0.1:0" --no-sandboxed-spawn | tee "$out/reference-ws.txt"
echo "== reference, websocket, client not decoding"
$bench --spawn "$ref exec-server --listen ws://127.0.0.1:0" --only b --no-decode | tee "$out/reference-ws-nodecode.txt"
echo "== reference, stdio"
$bench --spawn "$ref exec-server --listen stdio://" --stdio --only abcde --no-sandboxed-spawn | tee "$out/reference-stdio.txt"
