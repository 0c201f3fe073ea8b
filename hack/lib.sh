# hack/lib.sh — the steps hack/kube-build.sh and hack/scheduler-plugins-build.sh share, sourced
# by both (not run). Each builds Go binaries from pinned modules into a cache dir, DEST, and
# prints DEST on the last line of stdout:
#
#   - the fast path: DEST is up to date (the script's `up_to_date DIR`: its BUILD-INFO's
#     "inputs" line is the hash of RECIPE and the INPUTS files, and every output is there);
#   - a flock on $CACHE_ROOT/NAME.lock keeps two runs from building at once (the second
#     waits, then finds the first one's build);
#   - the build goes into a temp dir beside DEST (Go: GOTOOLCHAIN=local, CGO_ENABLED=0, go.sum
#     locked with -mod=readonly), which then replaces DEST.
#
# The sourcing script sets PROG (its name, for messages) and HERE (hack/) before sourcing, and
# NAME (DEST's base name, e.g. kube-v1.37.2), RECIPE and INPUTS before calling the functions.

CACHE_ROOT="${BATCHGATE_KUBE_CACHE_ROOT:-$HOME/.cache/batchgate}"

log() { echo "$PROG: $*" >&2; }
die() { echo "$PROG: ERROR: $*" >&2; exit 1; }

# inputs_stamp: what BUILD-INFO's "inputs" line must say: a hash of RECIPE and the INPUTS.
inputs_stamp() { { echo "recipe $RECIPE"; cat "${INPUTS[@]}"; } | sha256sum | cut -d' ' -f1; }

# exit_if_built: print DEST and exit when it is up to date.
exit_if_built() {
  if up_to_date "$DEST"; then
    echo "$DEST"
    exit 0
  fi
}

# lock_build WHAT: take the build lock (waiting for another run building WHAT), then exit if
# that run built DEST.
lock_build() {
  command -v flock >/dev/null || die "no 'flock' (util-linux) on PATH"
  mkdir -p "$CACHE_ROOT"
  exec 9>"$CACHE_ROOT/$NAME.lock"
  if ! flock -n 9; then
    log "another $PROG.sh is building $1; waiting for it"
    flock 9
  fi
  exit_if_built # the other run built it
}

# start_build: the Go environment (go_version), and the temp dir TMP beside DEST with the log
# file LOGF, removed on exit unless install_build moved it in.
start_build() {
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false"
  unset GOOS GOARCH GOBIN
  go_version="$(go env GOVERSION)"
  TMP="$(mktemp -d "$CACHE_ROOT/.$NAME.tmp.XXXXXX")"
  LOGF="$TMP/.build.log"
  trap 'rm -rf "$TMP"' EXIT
}

# run_go WHAT DIR MODULE@VERSION go ARGS...: run in DIR, output to the log; on failure show the
# first error lines and say what failed.
run_go() {
  local what=$1 dir=$2 modver=$3; shift 3
  local t0=$SECONDS
  if ! (cd "$dir" && "$@") >"$LOGF" 2>&1; then
    log "FAILED: $what of $modver (module hack/${dir#"$HERE/"}, $go_version):"
    grep -v '^go: downloading ' "$LOGF" | head -n 25 | sed 's/^/    /' >&2
    log "(full output: $(wc -l <"$LOGF") lines; command: $*)"
    exit 1
  fi
  log "$what of $modver: $((SECONDS - t0)) s"
}

# kube_ldflags VERSION MAJOR MINOR BUILD_DATE: the -ldflags of a binary built on Kubernetes
# VERSION (vX.Y.Z), what kubernetes' own build (hack/lib/version.sh) sets. gitVersion also makes
# the binary version (component-base/compatibility), so emulation and compatibility versions
# default to it and the feature gates are those of VERSION; without it the binary is
# v0.0.0-master. gitCommit is not known from a module; left empty.
kube_ldflags() {
  local ldf="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf+=" -X $pkg.gitVersion=$1 -X $pkg.gitMajor=$2 -X $pkg.gitMinor=$3"
    ldf+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=clean -X $pkg.buildDate=$4"
  done
  echo "$ldf"
}

# install_build: swap the finished TMP in as DEST, and print DEST.
install_build() {
  rm -f "$LOGF"
  chmod 755 "$TMP"
  if [[ -e "$DEST" ]]; then
    local old
    old="$(mktemp -d "$CACHE_ROOT/.$NAME.old.XXXXXX")"
    mv "$DEST" "$old/"
    mv "$TMP" "$DEST"
    rm -rf "$old"
  else
    mv "$TMP" "$DEST"
  fi
  trap - EXIT
  log "installed in $DEST"
  echo "$DEST"
}
