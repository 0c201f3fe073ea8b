#!/usr/bin/env bash
# hack/scheduler-plugins-build.sh — build the kube-scheduler of sigs.k8s.io/scheduler-plugins
# (its cmd/scheduler: kube-scheduler with the Coscheduling plugin, among others) from the Go
# module pinned in hack/kube/scheduler-plugins/, and print the directory holding it on the
# LAST line of stdout. Used by tests/e2e/test_coscheduling.py.
#
# The dir, ${BATCHGATE_KUBE_CACHE_ROOT:-$HOME/.cache/batchgate}/scheduler-plugins-vX.Y.Z/,
# holds:
#   kube-scheduler                      the scheduler (`--version`: the Kubernetes it is built
#                                       on, v1.33.5 for scheduler-plugins v0.33.5)
#   scheduling.x-k8s.io_podgroups.yaml  the PodGroup CRD, copied from the module
#   BUILD-INFO                          versions, Go, build date, a hash of the inputs
# When all are there and BUILD-INFO matches the inputs (go.mod, go.sum, this script's
# RECIPE), the dir is printed at once. Otherwise it is built (go.sum locked, -mod=readonly)
# into a temp dir beside it, which then replaces the dir; a flock on
# scheduler-plugins-vX.Y.Z.lock keeps two runs from building at once. With
# BATCHGATE_NO_BUILD=1 it only looks: no cached build is an error (tests/e2e's convention).
#
# Go: the `go` on PATH, GOTOOLCHAIN=local (at least the go line of go.mod: 1.26.0),
# CGO_ENABLED=0, -trimpath, the default GOMODCACHE/GOCACHE (shared with hack/kube-build.sh,
# whose compiled packages are of other k8s.io versions, so little is reused). Measured with
# Go 1.26.8 on a 2-core machine busy with other builds and tests (load ~12): cold (empty
# GOMODCACHE and GOCACHE) 17 min wall, 6.5 CPU-minutes (download 25 s); with GOCACHE warm
# 18 s; cached 0.1 s. Disk: ~540 MB of modules, ~1.8 GB of GOCACHE.
#
# Progress goes to stderr. A failed build prints the first error lines and which
# module/version failed, and exits non-zero. The steps it shares with hack/kube-build.sh are in
# hack/lib.sh.
set -euo pipefail

# Bump when the build flags below change, so a cached binary is rebuilt.
RECIPE=1

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MOD_DIR="$HERE/kube/scheduler-plugins"
MODULE=sigs.k8s.io/scheduler-plugins
CRD=scheduling.x-k8s.io_podgroups.yaml
# where the module keeps the CRD, first found wins
CRD_SOURCES=("config/crd/bases/$CRD" "manifests/coscheduling/crd.yaml")
PROG=scheduler-plugins-build
# shellcheck source=hack/lib.sh
source "$HERE/lib.sh"

[[ $# -eq 0 ]] || die "usage: hack/scheduler-plugins-build.sh (no arguments; the version is pinned in $MOD_DIR/go.mod)"
[[ -f "$MOD_DIR/go.mod" && -f "$MOD_DIR/go.sum" ]] || die "$MOD_DIR/go.mod or go.sum is missing"

# The pinned version, read from go.mod (no Go needed for the fast path).
SV="$(sed -n "s|^require $MODULE \(v[0-9][0-9.]*\)\$|\1|p" "$MOD_DIR/go.mod")"
[[ -n "$SV" ]] || die "$MOD_DIR/go.mod has no 'require $MODULE vX.Y.Z' line"
# The Kubernetes it builds on (its go.mod's `replace k8s.io/kubernetes => ... vX.Y.Z`).
KV="$(sed -n 's|^\s*k8s\.io/kubernetes => k8s\.io/kubernetes \(v[0-9][0-9.]*\)$|\1|p' "$MOD_DIR/go.mod")"
[[ "$KV" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]] \
  || die "$MOD_DIR/go.mod has no 'k8s.io/kubernetes => k8s.io/kubernetes vX.Y.Z' replace line"
kmajor="${BASH_REMATCH[1]}" kminor="${BASH_REMATCH[2]}"

NAME="scheduler-plugins-$SV"
DEST="$CACHE_ROOT/$NAME"
INPUTS=("$MOD_DIR/go.mod" "$MOD_DIR/go.sum")
STAMP="$(inputs_stamp)"

up_to_date() {
  local d=$1
  grep -qx "inputs $STAMP" "$d/BUILD-INFO" 2>/dev/null && [[ -x "$d/kube-scheduler" && -f "$d/$CRD" ]]
}

# --- fast path --------------------------------------------------------------
exit_if_built

if [[ "${BATCHGATE_NO_BUILD:-}" == 1 ]]; then
  die "$MODULE@$SV is not built in $DEST (BATCHGATE_NO_BUILD=1); run hack/scheduler-plugins-build.sh (cold: 6.5 CPU-minutes, once)"
fi
command -v go >/dev/null || die "no 'go' on PATH (need Go >= 1.26.0) to build $MODULE@$SV"
lock_build "$SV"

# --- build ------------------------------------------------------------------
start_build

log "building $MODULE@$SV cmd/scheduler (kube-scheduler $KV) with $go_version into $DEST"
log "(cold: 6.5 CPU-minutes, 17 min measured on a busy 2-core machine; see the head of this script)"
build_date="$(date -u ${SOURCE_DATE_EPOCH:+--date=@$SOURCE_DATE_EPOCH} +%Y-%m-%dT%H:%M:%SZ)"
# The version kube-scheduler reports and runs as: that of the Kubernetes it is built on.
# (Upstream's Makefile sets gitVersion to the scheduler-plugins tag, v0.33.5; component-base
# takes the binary version, and so the emulation version and which feature gates are on,
# from gitVersion, and 0.33 is no Kubernetes version.)
ldf="$(kube_ldflags "$KV" "$kmajor" "$kminor" "$build_date")"
run_go "download" "$MOD_DIR" "$MODULE@$SV" go list -deps -f '' "$MODULE/cmd/scheduler"
run_go "go build cmd/scheduler" "$MOD_DIR" "$MODULE@$SV" \
  go build -trimpath -ldflags "$ldf" -o "$TMP/kube-scheduler" "$MODULE/cmd/scheduler"

src="$(cd "$MOD_DIR" && go list -m -f '{{.Dir}}' "$MODULE")"
for f in "${CRD_SOURCES[@]}"; do
  if [[ -f "$src/$f" ]]; then
    install -m 644 "$src/$f" "$TMP/$CRD"
    break
  fi
done
[[ -f "$TMP/$CRD" ]] || die "no PodGroup CRD in $MODULE@$SV (looked for ${CRD_SOURCES[*]} in $src)"
grep -q '^  name: podgroups.scheduling.x-k8s.io$' "$TMP/$CRD" \
  || die "$src/$f is not the PodGroup CRD (no 'name: podgroups.scheduling.x-k8s.io')"

{
  echo "scheduler-plugins $SV (hack/kube/scheduler-plugins)"
  echo "kubernetes $KV"
  echo "go $go_version"
  echo "built $build_date"
  echo "inputs $STAMP"
} >"$TMP/BUILD-INFO"
install_build
