#!/usr/bin/env bash
# hack/kube-build.sh VERSION — build the Kubernetes control plane from Go
# modules into a cache dir and print that dir on the LAST line of stdout.
#
#   VERSION   1.37 | 1.37.2 | v1.37.2 | 1.34 | ...  A minor version means the
#             patch pinned in hack/kube/vMAJOR.MINOR/go.mod; a full version
#             must be that pinned patch.
#
# The dir, ${BATCHGATE_KUBE_CACHE_ROOT:-$HOME/.cache/batchgate}/kube-vX.Y.Z/,
# holds kube-apiserver, kube-controller-manager, kube-scheduler (from
# hack/kube/vX.Y), etcd (hack/kube/etcd) and kwok (hack/kube/kwok), plus
# kwok-stages/ (kwok's own Stage files from its module, for kwok --config; see
# hack/kube/README.md) and BUILD-INFO. When all of it exists and BUILD-INFO
# matches the pinned inputs (those go.mod/go.sum files, etcd's main.go, this
# script's RECIPE), the dir is printed at once. Otherwise what is missing is
# built (go.sum locked, -mod=readonly) into a temp dir beside it, which then
# replaces the dir; a flock on kube-vX.Y.Z.lock keeps two runs from building
# at once.
#
# Go: the `go` on PATH, GOTOOLCHAIN=local (it must be at least the go line of
# the go.mod files: 1.26.0), CGO_ENABLED=0, the default GOMODCACHE/GOCACHE so
# later builds reuse downloads and compiled packages. Cold, on 2 cores: see
# hack/kube/README.md.
#
# Progress goes to stderr. A failed build prints the first error lines and
# which module/version failed, and exits non-zero. The steps it shares with
# hack/scheduler-plugins-build.sh are in hack/lib.sh.
set -euo pipefail

# Bump when the build flags below change, so cached binaries are rebuilt.
RECIPE=1

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUBE_MODS="$HERE/kube"
PROG=kube-build
# shellcheck source=hack/lib.sh
source "$HERE/lib.sh"

[[ $# -eq 1 ]] || die "usage: hack/kube-build.sh VERSION (e.g. 1.37 or 1.37.2); pinned: $(
  cd "$KUBE_MODS" && ls -d v*/ 2>/dev/null | tr -d / | tr '\n' ' ')"

# --- version -> module dir, pinned patch ------------------------------------
want="${1#v}"
[[ "$want" =~ ^([0-9]+)\.([0-9]+)(\.([0-9]+))?$ ]] \
  || die "bad VERSION '$1': want MAJOR.MINOR or MAJOR.MINOR.PATCH"
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
MOD_DIR="$KUBE_MODS/v$major.$minor"
[[ -f "$MOD_DIR/go.mod" ]] || die "no module for Kubernetes $major.$minor under hack/kube/ (have: $(
  cd "$KUBE_MODS" && ls -d v*/ 2>/dev/null | tr -d / | tr '\n' ' ')); see hack/kube/README.md to add one"
pinned="$(sed -n 's/^require k8s\.io\/kubernetes v\([0-9][0-9.]*\)$/\1/p' "$MOD_DIR/go.mod")"
[[ -n "$pinned" ]] || die "$MOD_DIR/go.mod has no 'require k8s.io/kubernetes vX.Y.Z' line"
if [[ -n "${BASH_REMATCH[3]}" && "$want" != "$pinned" ]]; then
  die "Kubernetes $want is not pinned; hack/kube/v$major.$minor pins $pinned"
fi
KV="v$pinned"
NAME="kube-$KV"
DEST="$CACHE_ROOT/$NAME"
KUBE_BINS=(kube-apiserver kube-controller-manager kube-scheduler)
ALL_BINS=("${KUBE_BINS[@]}" etcd kwok)
# kwok's Stage files (sigs.k8s.io/kwok/kustomize/stage/...) copied to
# kwok-stages/: kwokctl's defaults for a cluster with node leases.
KWOK_STAGES=(node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
             node/heartbeat/node-heartbeat.yaml
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml)

INPUTS=("$MOD_DIR/go.mod" "$MOD_DIR/go.sum"
        "$KUBE_MODS/etcd/go.mod" "$KUBE_MODS/etcd/go.sum" "$KUBE_MODS/etcd/main.go"
        "$KUBE_MODS/kwok/go.mod" "$KUBE_MODS/kwok/go.sum")
STAMP="$(inputs_stamp)"

# up_to_date DIR: BUILD-INFO matches the inputs and every binary is there.
up_to_date() {
  local d=$1 b
  grep -qx "inputs $STAMP" "$d/BUILD-INFO" 2>/dev/null || return 1
  for b in "${ALL_BINS[@]}"; do [[ -x "$d/$b" ]] || return 1; done
  for b in "${KWOK_STAGES[@]##*/}"; do [[ -f "$d/kwok-stages/$b" ]] || return 1; done
}

# --- fast path --------------------------------------------------------------
exit_if_built

command -v go >/dev/null || die "no 'go' on PATH (need Go >= 1.26.0)"
lock_build "$KV"

# --- build ------------------------------------------------------------------
start_build

# Keep the binaries of DEST that are current; build the rest.
missing=()
for b in "${ALL_BINS[@]}"; do
  if [[ -x "$DEST/$b" ]] && grep -qx "inputs $STAMP" "$DEST/BUILD-INFO" 2>/dev/null; then
    ln "$DEST/$b" "$TMP/$b" 2>/dev/null || cp -p "$DEST/$b" "$TMP/$b"
  else
    missing+=("$b")
  fi
done
if ((${#missing[@]})); then
  log "building ${missing[*]} for Kubernetes $KV with $go_version into $DEST"
  [[ " ${missing[*]} " == *" kube-apiserver "* ]] &&
    log "(from cold, on 2 cores, the Kubernetes part takes 10-20 minutes; see hack/kube/README.md)"
fi

# mod_version DIR MODULE: the version DIR's go.mod selects for MODULE.
mod_version() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

# buildDate: $SOURCE_DATE_EPOCH if set, else the release time of
# k8s.io/kubernetes@$KV on the module proxy, so that a rebuild gives the same
# bytes (with the same Go).
if [[ -n "${SOURCE_DATE_EPOCH:-}" ]]; then
  build_date="$(date -u --date=@"$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
else
  build_date="$(cd "$MOD_DIR" && go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes 2>/dev/null || true)"
  [[ -n "$build_date" ]] || build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
fi
want_kube=()
for b in "${KUBE_BINS[@]}"; do
  [[ " ${missing[*]} " == *" $b "* ]] && want_kube+=("k8s.io/kubernetes/cmd/$b")
done
if ((${#want_kube[@]})); then
  kldf="$(kube_ldflags "$KV" "$major" "$minor" "$build_date")"
  run_go "download" "$MOD_DIR" "k8s.io/kubernetes@$KV" \
    go list -deps -tags selinux,notest,grpcnotrace -f '' "${want_kube[@]}"
  run_go "go build ${want_kube[*]##*/}" "$MOD_DIR" "k8s.io/kubernetes@$KV" \
    go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$kldf" -o "$TMP/" "${want_kube[@]}"
fi

if [[ " ${missing[*]} " == *" etcd "* ]]; then
  ev="$(mod_version "$KUBE_MODS/etcd" go.etcd.io/etcd/server/v3)"
  run_go "download" "$KUBE_MODS/etcd" "go.etcd.io/etcd/server/v3@$ev" go list -deps -f '' .
  run_go "go build etcd" "$KUBE_MODS/etcd" "go.etcd.io/etcd/server/v3@$ev" \
    go build -trimpath -ldflags "-s -w" \
    -o "$TMP/etcd" .
fi

if [[ " ${missing[*]} " == *" kwok "* ]]; then
  wv="$(mod_version "$KUBE_MODS/kwok" sigs.k8s.io/kwok)"
  run_go "download" "$KUBE_MODS/kwok" "sigs.k8s.io/kwok@$wv" \
    go list -deps -f '' sigs.k8s.io/kwok/cmd/kwok
  run_go "go build kwok" "$KUBE_MODS/kwok" "sigs.k8s.io/kwok@$wv" \
    go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$wv" \
    -o "$TMP/kwok" sigs.k8s.io/kwok/cmd/kwok
fi

for b in "${ALL_BINS[@]}"; do
  [[ -x "$TMP/$b" ]] || die "internal: $b was not built"
done
kwok_src="$(cd "$KUBE_MODS/kwok" && go mod download sigs.k8s.io/kwok && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
mkdir -p "$TMP/kwok-stages"
for f in "${KWOK_STAGES[@]}"; do
  f="$kwok_src/kustomize/stage/$f"
  [[ -f "$f" ]] || die "kwok stage file $f is missing (sigs.k8s.io/kwok layout changed?)"
  install -m 644 "$f" "$TMP/kwok-stages/"
done
{
  echo "kubernetes $KV (hack/kube/v$major.$minor)"
  echo "etcd $(mod_version "$KUBE_MODS/etcd" go.etcd.io/etcd/server/v3)"
  echo "kwok $(mod_version "$KUBE_MODS/kwok" sigs.k8s.io/kwok)"
  echo "go $go_version"
  echo "updated $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "inputs $STAMP"
} >"$TMP/BUILD-INFO"
install_build
