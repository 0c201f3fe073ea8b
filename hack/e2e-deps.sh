#!/usr/bin/env bash
# hack/e2e-deps.sh — everything the end-to-end tests (tests/e2e) need, on a fresh Debian
# machine, as root, without stdin (CI):
#   * python3 with venv support (Debian's python3-venv) for the Makefile's venv. Python
#     packages go into that venv only, from the lock (make setup); this script never
#     pip-installs into the machine's Python.
#   * the control plane for Kubernetes $KUBE_VERSION (default 1.37; 1.34 to 1.37 are
#     supported): kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok,
#     built from Go modules by hack/kube-build.sh into ~/.cache/batchgate/kube-vX.Y.Z
#     (about 10 minutes cold on 2 cores, then under a second).
#
#   hack/e2e-deps.sh                        install, then print the binaries' directory
#   hack/e2e-deps.sh --print-assets VERSION build what is missing for VERSION and print one
#                                           directory holding the five binaries (envtest's
#                                           convention: KUBEBUILDER_ASSETS=$(...))
#
# Idempotent and quiet when everything is in place. The directory is the last stdout line.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "e2e-deps: $*" >&2; }
die() { echo "e2e-deps: ERROR: $*" >&2; exit 1; }

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-2}"; }
case "${1:-}" in
  --print-assets)
    [[ $# -eq 2 ]] || die "usage: hack/e2e-deps.sh --print-assets VERSION (e.g. 1.37)"
    KUBEBUILDER_ASSETS='' USE_EXISTING_CLUSTER='' exec bash "$HERE/kube-build.sh" "$2" ;;
  -h|--help) usage 0 ;;
  "") ;;
  *) echo "e2e-deps: unknown argument '$1'" >&2; usage 2 ;;
esac

export DEBIAN_FRONTEND=noninteractive
PYTHON="${PYTHON:-$(command -v python3 || true)}"
apt_get_install() {
  [[ "$(id -u)" == 0 ]] || die "need root to apt-get install $*"
  log "apt-get install $*"
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "$@" >&2
}
# The Makefile makes a venv (`python3 -m venv` needs ensurepip, which Debian ships apart).
if [[ -z "$PYTHON" ]]; then
  apt_get_install python3 python3-venv
elif ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1 && [[ "$PYTHON" == /usr/bin/* ]]; then
  apt_get_install python3-venv
fi

if [[ "${USE_EXISTING_CLUSTER:-}" != "true" && -z "${KUBEBUILDER_ASSETS:-}" ]]; then
  command -v go >/dev/null || die "no Go on PATH: the control plane is built from Go modules" \
    "(Go 1.26 or later; Debian's golang-go is older); or set KUBEBUILDER_ASSETS to envtest binaries"
fi
dir="$(bash "$HERE/kube-binaries.sh" | tail -n1)" || die "hack/kube-binaries.sh failed"
echo "$dir"
