#!/usr/bin/env bash
# bench/peers/build.sh [kyverno|gatekeeper ...] — build the peers bench/bench_peers.py
# measures batchgate against, from their Go modules through the Go module proxy, into
# ${BATCHGATE_PEERS_CACHE:-$HOME/.cache/batchgate/peers}/ and print that dir on the LAST line
# of stdout. Bench-only: nothing here runs in CI, and no third-party code is committed (each
# peer is a go.mod requiring it, with the replace directives its own go.mod needs, and a
# tools.go naming the command).
#
#   kyverno      github.com/kyverno/kyverno/cmd/kyverno (the admission controller)
#   gatekeeper   github.com/open-policy-agent/gatekeeper/v3 (the manager: validating and
#                mutating webhooks, audit, status)
#
# A binary is rebuilt only when its go.mod/go.sum changed (BUILD-INFO records their hash and
# the version). Builds are heavy (thousands of packages): they run under `nice -n 19` with
# `go build -p 1` so a shared machine keeps working; cold, on 2 busy cores, see bench/README.md.
# Progress goes to stderr; a failed build prints its first error lines and exits non-zero.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEST="${BATCHGATE_PEERS_CACHE:-$HOME/.cache/batchgate/peers}"
declare -A MODULE=([kyverno]=github.com/kyverno/kyverno [gatekeeper]=github.com/open-policy-agent/gatekeeper/v3)
declare -A PACKAGE=([kyverno]=github.com/kyverno/kyverno/cmd/kyverno [gatekeeper]=github.com/open-policy-agent/gatekeeper/v3)

log() { echo "peers-build: $*" >&2; }
die() { echo "peers-build: ERROR: $*" >&2; exit 1; }

peers=("$@")
((${#peers[@]})) || peers=(kyverno gatekeeper)
command -v go >/dev/null || die "no 'go' on PATH (need Go >= 1.26.6)"
mkdir -p "$DEST"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false"
go_version="$(go env GOVERSION)"

for peer in "${peers[@]}"; do
  [[ -n "${MODULE[$peer]:-}" ]] || die "unknown peer '$peer' (kyverno, gatekeeper)"
  dir="$HERE/$peer"
  version="$(cd "$dir" && go list -m -f '{{.Version}}' "${MODULE[$peer]}")"
  stamp="$(cat "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -d' ' -f1)"
  info="$DEST/$peer.BUILD-INFO"
  if [[ -x "$DEST/$peer" ]] && grep -qx "inputs $stamp" "$info" 2>/dev/null; then
    continue
  fi
  log "building $peer ${MODULE[$peer]}@$version with $go_version (nice -n 19, -p 1: tens of minutes cold)"
  logf="$(mktemp)"
  t0=$SECONDS
  if ! (cd "$dir" && nice -n 19 go build -p 1 -trimpath -ldflags "-s -w" -o "$DEST/.$peer.tmp" \
        "${PACKAGE[$peer]}") >"$logf" 2>&1; then
    log "FAILED: go build ${PACKAGE[$peer]}@$version ($go_version):"
    grep -v '^go: downloading ' "$logf" | head -n 25 | sed 's/^/    /' >&2
    rm -f "$logf"
    exit 1
  fi
  rm -f "$logf"
  mv "$DEST/.$peer.tmp" "$DEST/$peer"
  printf '%s\n' "$peer ${MODULE[$peer]} $version" "go $go_version" "inputs $stamp" \
    "built in $((SECONDS - t0)) s" >"$info"
  log "built $peer $version in $((SECONDS - t0)) s"
done
echo "$DEST"
