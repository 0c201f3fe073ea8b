#!/usr/bin/env bash
# hack/e2e-deps.sh — install everything the end-to-end tests (tests/e2e) need
# on a fresh Debian bookworm machine, as root, without stdin (CI):
#   * Debian packages: etcd-server (and, when the control-plane binaries must
#     be built, golang-go, rsync, dpkg-dev, golang-github-modern-go-reflect2-dev)
#   * kube-apiserver / kube-controller-manager / kube-scheduler v1.20.2, built
#     once into ${BATCHGATE_KUBE_CACHE:-$HOME/.cache/batchgate/kube-v1.20.2}
#     by hack/kube-binaries.sh (about 4-8 minutes on 2 cores; seconds afterwards)
#   * the Python packages the tests import (pytest, kubernetes, cryptography,
#     pyyaml), unless already importable; set BATCHGATE_SKIP_PIP=1 to skip.
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

# Python packages for the tests.
if [[ "${BATCHGATE_SKIP_PIP:-}" != "1" && -n "$PYTHON" ]]; then
  if ! "$PYTHON" -c 'import pytest, kubernetes, cryptography, yaml' >/dev/null 2>&1; then
    if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
      [[ "$(id -u)" == 0 ]] || die "$PYTHON has no pip; install python3-pip"
      log "installing python3-pip"
      apt-get update -qq >&2
      apt-get install -y -qq --no-install-recommends python3-pip >&2
    fi
    log "pip install pytest kubernetes cryptography pyyaml"
    pip_args=(-m pip install -q --disable-pip-version-check pytest kubernetes cryptography pyyaml)
    if ! out="$("$PYTHON" "${pip_args[@]}" 2>&1)"; then
      if grep -q externally-managed <<<"$out"; then
        # Debian's own python3 (PEP 668): a throw-away CI machine may do this
        log "$PYTHON is externally managed; retrying with --break-system-packages"
        "$PYTHON" "${pip_args[@]}" --break-system-packages >&2 || die "pip install failed"
      else
        echo "$out" >&2
        die "pip install failed"
      fi
    fi
  fi
fi

# Control-plane binaries (finds them, or builds them once).
dir="$("$HERE/kube-binaries.sh" | tail -n1)" || die "hack/kube-binaries.sh failed"
if [[ "${USE_EXISTING_CLUSTER:-}" != "true" ]]; then
  for b in etcd kube-apiserver; do
    [[ -x "$dir/$b" ]] || die "$dir/$b missing after hack/kube-binaries.sh"
  done
fi
echo "$dir"
