#!/usr/bin/env bash
# hack/kube-binaries.sh — find (or build) the Kubernetes control-plane binaries
# the end-to-end tests need: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler.
#
# Prints the directory holding the binaries on the LAST line of stdout.
# Exits non-zero with a clear message on stderr when that is impossible.
#
# Sources, first that works wins:
#   1. $KUBEBUILDER_ASSETS (envtest layout: etcd, kube-apiserver, and maybe
#      kube-controller-manager / kube-scheduler).
#   2. A cache dir outside the repo:
#        ${BATCHGATE_KUBE_CACHE:-$HOME/.cache/batchgate/kube-v1.20.2}
#      holding kube-apiserver, kube-controller-manager, kube-scheduler, and
#      etcd (a symlink to /usr/bin/etcd from Debian's etcd-server package).
#   3. Otherwise build v1.20.2 from Debian bookworm's `kubernetes` source
#      package into that cache (needs root + apt; ~8 minutes on 2 cores, of
#      which `make` spends some generating sources and building its tools).
#      Set BATCHGATE_NO_BUILD=1 to forbid this step (then exit 1 instead).
#
# USE_EXISTING_CLUSTER=true with KUBECONFIG set means no binaries are needed;
# the script then prints nothing useful and exits 0 (the tests use the cluster).
#
# Progress messages go to stderr; only the final directory goes to stdout.
set -euo pipefail

KUBE_VERSION=1.20.2
CACHE_DIR="${BATCHGATE_KUBE_CACHE:-$HOME/.cache/batchgate/kube-v${KUBE_VERSION}}"
CACHE_PARENT="$(dirname "$CACHE_DIR")"
BINS=(kube-apiserver kube-controller-manager kube-scheduler)

log() { echo "kube-binaries: $*" >&2; }
die() { echo "kube-binaries: ERROR: $*" >&2; exit 1; }

have_all() { # dir names...
  local dir=$1; shift
  local b
  for b in "$@"; do [[ -x "$dir/$b" ]] || return 1; done
}

# --- 0. existing cluster: nothing to provide ------------------------------
if [[ "${USE_EXISTING_CLUSTER:-}" == "true" ]]; then
  [[ -n "${KUBECONFIG:-}" ]] || die "USE_EXISTING_CLUSTER=true needs KUBECONFIG"
  log "USE_EXISTING_CLUSTER=true: using the cluster in \$KUBECONFIG, no binaries needed"
  echo ""
  exit 0
fi

# --- 1. envtest assets ----------------------------------------------------
if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  have_all "$KUBEBUILDER_ASSETS" etcd kube-apiserver \
    || die "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks etcd and/or kube-apiserver"
  if ! have_all "$KUBEBUILDER_ASSETS" kube-controller-manager kube-scheduler; then
    log "warning: $KUBEBUILDER_ASSETS has no kube-controller-manager/kube-scheduler;" \
        "tests needing controllers or scheduling will fail or skip"
  fi
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

ensure_etcd_link() {
  if [[ ! -x "$CACHE_DIR/etcd" ]]; then
    local etcd
    etcd="$(command -v etcd || true)"
    [[ -n "$etcd" ]] || etcd=/usr/bin/etcd
    [[ -x "$etcd" ]] || return 1
    ln -sfn "$etcd" "$CACHE_DIR/etcd"
  fi
}

# --- 2. cache -------------------------------------------------------------
if have_all "$CACHE_DIR" "${BINS[@]}"; then
  if ensure_etcd_link; then
    echo "$CACHE_DIR"
    exit 0
  fi
  log "cache $CACHE_DIR is complete but etcd is missing; installing etcd-server"
fi

# --- 3. build from Debian's source package --------------------------------
if [[ "${BATCHGATE_NO_BUILD:-}" == "1" ]]; then
  die "no binaries: \$KUBEBUILDER_ASSETS unset, cache $CACHE_DIR incomplete, and BATCHGATE_NO_BUILD=1"
fi
[[ "$(id -u)" == 0 ]] || die "building needs root (apt-get); run hack/e2e-deps.sh as root, or set KUBEBUILDER_ASSETS"
command -v apt-get >/dev/null || die "no apt-get: not a Debian machine; set KUBEBUILDER_ASSETS to envtest binaries"

# shellcheck disable=SC1091
. /etc/os-release 2>/dev/null || true
[[ "${VERSION_CODENAME:-}" == "bookworm" ]] \
  || log "warning: expected Debian bookworm, found '${VERSION_CODENAME:-unknown}'; trying anyway"

export DEBIAN_FRONTEND=noninteractive
mkdir -p "$CACHE_PARENT"
exec 9>"$CACHE_PARENT/.kube-binaries.lock"
if ! flock -n 9; then
  log "another build is running; waiting for its lock"
  flock 9
fi
# Someone else may have finished the build while we waited.
if have_all "$CACHE_DIR" "${BINS[@]}" && ensure_etcd_link; then
  echo "$CACHE_DIR"
  exit 0
fi

APT_UPDATED=0
apt_update() {
  if [[ $APT_UPDATED == 0 ]]; then
    log "apt-get update"
    apt-get update -qq >&2 || die "apt-get update failed"
    APT_UPDATED=1
  fi
}

# Install packages that are not installed yet (quiet when all are present).
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    apt_update
    log "apt-get install ${missing[*]}"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
      || die "apt-get install ${missing[*]} failed"
  fi
}

# Make sure a deb-src entry for bookworm exists (deb822 or one-line format).
ensure_deb_src() {
  if apt-get indextargets 2>/dev/null | grep -q '^Identifier: Sources$'; then
    return 0
  fi
  local f=/etc/apt/sources.list.d/batchgate-bookworm-src.sources
  local mirror=http://deb.debian.org/debian
  # Reuse the mirror configured for bookworm main, if we can find one.
  local found
  found="$(grep -hE '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
            | awk '{print $2}' | grep -E '/debian/?$' | head -n1 || true)"
  [[ -n "$found" ]] || found="$(grep -hE '^\s*deb\s' /etc/apt/sources.list 2>/dev/null \
            | awk '{for(i=2;i<=NF;i++) if ($i ~ /^https?:/) {print $i; exit}}' \
            | grep -E '/debian/?$' | head -n1 || true)"
  [[ -n "$found" ]] && mirror="$found"
  log "adding deb-src entry for bookworm ($mirror) in $f"
  cat >"$f" <<EOF
# added by batchgate hack/kube-binaries.sh: source packages for building kubernetes
Types: deb-src
URIs: $mirror
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  APT_UPDATED=0
}

apt_install etcd-server
ensure_etcd_link || true

# If the cache was complete apart from etcd, we are done now.
if have_all "$CACHE_DIR" "${BINS[@]}" && ensure_etcd_link; then
  echo "$CACHE_DIR"
  exit 0
fi

log "no cached binaries in $CACHE_DIR: building Kubernetes v$KUBE_VERSION from Debian's source package (about 8 minutes on 2 cores)"
apt_install golang-go rsync dpkg-dev make golang-github-modern-go-reflect2-dev ca-certificates
ensure_deb_src
apt_update

REFLECT2_SRC=/usr/share/gocode/src/github.com/modern-go/reflect2
[[ -d "$REFLECT2_SRC" ]] || die "$REFLECT2_SRC missing (package golang-github-modern-go-reflect2-dev)"

BUILD_ROOT="$CACHE_PARENT/build-kube-v$KUBE_VERSION"
rm -rf "$BUILD_ROOT"
mkdir -p "$BUILD_ROOT"
# On failure the build tree is left in place for inspection; a rerun starts
# over with a fresh tree.

cd "$BUILD_ROOT"
log "apt-get source kubernetes (in $BUILD_ROOT)"
apt-get source -qq kubernetes >&2 \
  || die "apt-get source kubernetes failed (is deb-src for bookworm configured?)"
SRC="$(find "$BUILD_ROOT" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -n1)"
[[ -n "$SRC" && -d "$SRC/cmd/kube-apiserver" ]] || die "unpacked kubernetes source not found in $BUILD_ROOT"
log "source tree: $SRC"

# The vendored reflect2 1.0.1 crashes at runtime under Go >= 1.18; use 1.0.2.
V_REFLECT2="$SRC/vendor/github.com/modern-go/reflect2"
[[ -d "$V_REFLECT2" ]] || die "$V_REFLECT2 missing in source tree"
rm -f "$V_REFLECT2"/*.go "$V_REFLECT2"/*.s
cp "$REFLECT2_SRC"/*.go "$REFLECT2_SRC"/*.s "$V_REFLECT2"/
rm -f "$V_REFLECT2"/*_test.go

# Kubernetes 1.20 builds in GOPATH mode (hack/lib/init.sh sets
# GO111MODULE=off) and `make` first generates sources that a plain `go build`
# lacks (pkg/generated/openapi). Mirror debian/rules: GOPATH=$SRC/.go with
# .go/src/k8s.io/kubernetes linking back to the tree. The version (v1.20.2)
# comes from the git-archive data baked into hack/lib/version.sh.
export CGO_ENABLED=0
export GOFLAGS=
export GOTOOLCHAIN=local
export GOPATH="$SRC/.go"
unset GOCACHE GO111MODULE
mkdir -p "$GOPATH/src/k8s.io"
[[ -L "$GOPATH/src/k8s.io/kubernetes" ]] || ln -s ../../.. "$GOPATH/src/k8s.io/kubernetes"
go version >&2

start=$(date +%s)
cd "$SRC"
WHAT="$(printf 'cmd/%s ' "${BINS[@]}")"
log "make WHAT=\"${WHAT% }\" (output in $BUILD_ROOT/make.log)"
if ! make WHAT="${WHAT% }" >"$BUILD_ROOT/make.log" 2>&1; then
  tail -n 40 "$BUILD_ROOT/make.log" >&2
  die "make failed; full log in $BUILD_ROOT/make.log"
fi
log "build took $(( $(date +%s) - start ))s"
OUT="$SRC/_output/bin"
have_all "$OUT" "${BINS[@]}" || die "make succeeded but $OUT lacks some of: ${BINS[*]}"

# Install atomically: populate a tmp dir next to the cache, then rename.
TMP_CACHE="$(mktemp -d "$CACHE_PARENT/.kube-v$KUBE_VERSION.tmp.XXXXXX")"
chmod 0755 "$TMP_CACHE"
for b in "${BINS[@]}"; do
  install -m 0755 "$OUT/$b" "$TMP_CACHE/$b"
done
ln -sfn "$(command -v etcd || echo /usr/bin/etcd)" "$TMP_CACHE/etcd"
"$TMP_CACHE/kube-apiserver" --version >&2 || die "built kube-apiserver does not run"
if [[ -e "$CACHE_DIR" ]]; then
  mv "$CACHE_DIR" "$CACHE_DIR.old.$$"
  mv "$TMP_CACHE" "$CACHE_DIR"
  rm -rf "$CACHE_DIR.old.$$"
else
  mv "$TMP_CACHE" "$CACHE_DIR"
fi
log "installed binaries into $CACHE_DIR"
rm -rf "$BUILD_ROOT"
echo "$CACHE_DIR"
