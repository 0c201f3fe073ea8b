#!/usr/bin/env bash
# hack/e2e-deps.sh — install everything the end-to-end tests (tests/e2e) need
# on a fresh Debian bookworm machine, as root, without stdin (CI):
#   * Debian packages: etcd-server (and, when the control-plane binaries must
#     be built, golang-go, rsync, dpkg-dev, golang-github-modern-go-reflect2-dev)
#   * kube-apiserver / kube-controller-manager / kube-scheduler v1.20.2, built
#     once into ${BATCHGATE_KUBE_CACHE:-$HOME/.cache/batchgate/kube-v1.20.2}
#     by hack/kube-binaries.sh (8 minutes on an idle 2-core machine, up to 15 when busy; then seconds)
#   * python3 with venv support (Debian's python3-venv) for the Makefile's venv.
#     Python packages go into that venv only, from the lock (make setup); this
#     script never pip-installs into the machine's Python.
# Idempotent and quiet when everything is already in place. Prints the binary
# directory on its last stdout line (as hack/kube-binaries.sh does).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-$(command -v python3 || command -v python || true)}"

log() { echo "e2e-deps: $*" >&2; }
die() { echo "e2e-deps: ERROR: $*" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive

if [[ "${USE_EXISTING_CLUSTER:-}" != "true" && -z "${KUBEBUILDER_ASSETS:-}" ]]; then
  if ! command -v etcd >/dev/null 2>&1; then
    [[ "$(id -u)" == 0 ]] || die "etcd missing and not root: install Debian's etcd-server"
    log "installing etcd-server"
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends etcd-server >&2
  fi
fi

# Python: the Makefile makes a venv (`python3 -m venv`, needs ensurepip, which
# Debian ships separately in python3-venv) and pip-installs '.[test]' there.
apt_get_install() {
  [[ "$(id -u)" == 0 ]] || die "need root to apt-get install $*"
  log "apt-get install $*"
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "$@" >&2
}
if [[ -z "$PYTHON" ]]; then
  apt_get_install python3 python3-venv python3-pip
  PYTHON="$(command -v python3)"
elif ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1 && [[ "$PYTHON" == /usr/bin/* ]]; then
  apt_get_install python3-venv
fi

# Control-plane binaries (finds them, or builds them once).
dir="$("$HERE/kube-binaries.sh" | tail -n1)" || die "hack/kube-binaries.sh failed"
if [[ "${USE_EXISTING_CLUSTER:-}" != "true" ]]; then
  for b in etcd kube-apiserver; do
    [[ -x "$dir/$b" ]] || die "$dir/$b missing after hack/kube-binaries.sh"
  done
fi
echo "$dir"
