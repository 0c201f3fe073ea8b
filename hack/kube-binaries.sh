#!/usr/bin/env bash
# hack/kube-binaries.sh — find (or build) the Kubernetes control plane the end-to-end tests
# run: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok.
#
# Prints the directory holding them on the LAST line of stdout (envtest's layout); progress
# goes to stderr. Exits non-zero with a clear message when that is impossible.
#
# Sources, first that applies wins:
#   1. USE_EXISTING_CLUSTER=true with KUBECONFIG: no binaries needed (prints an empty line).
#   2. $KUBEBUILDER_ASSETS: a directory in envtest's layout (etcd and kube-apiserver at least).
#   3. hack/kube-build.sh $KUBE_VERSION (default 1.37): the cached build, or a build from Go
#      modules (minutes, once per version). BATCHGATE_NO_BUILD=1 forbids the build step.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUBE_VERSION="${KUBE_VERSION:-1.37}"

log() { echo "kube-binaries: $*" >&2; }
die() { echo "kube-binaries: ERROR: $*" >&2; exit 1; }

if [[ "${USE_EXISTING_CLUSTER:-}" == "true" ]]; then
  [[ -n "${KUBECONFIG:-}" ]] || die "USE_EXISTING_CLUSTER=true needs KUBECONFIG"
  log "USE_EXISTING_CLUSTER=true: using the cluster in \$KUBECONFIG, no binaries needed"
  echo ""
  exit 0
fi

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  for b in etcd kube-apiserver; do
    [[ -x "$KUBEBUILDER_ASSETS/$b" ]] || die "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no $b"
  done
  for b in kube-controller-manager kube-scheduler kwok; do
    [[ -x "$KUBEBUILDER_ASSETS/$b" ]] \
      || log "warning: $KUBEBUILDER_ASSETS has no $b; tests that need it skip (fail in CI)"
  done
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

exec bash "$HERE/kube-build.sh" "$KUBE_VERSION"
