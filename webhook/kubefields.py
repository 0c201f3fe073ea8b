"""Kubernetes' own names that several modules spell: one definition each, so that no copy can drift.

batchgate's own names (its labels, annotations, Events, environment variables) are its contract
with users and live in ``contract.py``, each held to a row of the users' reference; the names here
are the Kubernetes API's, defined by Kubernetes, documented there. This module imports nothing, so
the webhook's rules, the reconciler and the building blocks can all use it.
"""

from __future__ import annotations

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
"""The key of a pod spec's hard node affinity (``affinity.nodeAffinity``) and hard pod (anti-)affinity
terms (``affinity.podAffinity``, ``affinity.podAntiAffinity``)."""

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server (1.21+) sets on every Namespace to the Namespace's own name."""

# Two of Kubernetes' recommended labels, which batchgate sets on the objects it writes itself:
# part-of ``batchgate``, and the component (``webhook``, ``usage``, ``namespace-labels``).
PART_OF_LABEL = "app.kubernetes.io/part-of"
COMPONENT_LABEL = "app.kubernetes.io/component"

RESIZE_SUBRESOURCE = "resize"
"""The Pod subresource of in-place resize (Kubernetes 1.33+; ``pods/resize`` in RBAC and in admission
rules): an UPDATE through it changes the resources of the pod's containers and nothing else."""

DEFAULT_SCHEDULER = "default-scheduler"
"""The ``spec.schedulerName`` the API server gives a pod that names none: kube-scheduler's default
profile. A pod naming another scheduler is bound by that scheduler, never by kube-scheduler (unless
kube-scheduler runs a profile of that name)."""
