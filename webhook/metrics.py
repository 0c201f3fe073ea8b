"""Prometheus metrics (prometheus-client: exposition format and multiprocess support
are not worth re-writing by hand)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "batchgate_admission_requests_total",
    "AdmissionReview requests by endpoint, operation and outcome "
    "(allowed, mutated, denied, bad_request, unavailable).",
    ["endpoint", "operation", "outcome"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "batchgate_admission_duration_seconds",
    "Time from request body read to response, by endpoint.",
    ["endpoint"],
    buckets=(0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
    registry=REGISTRY,
)
POLICY_DECISIONS = Counter(
    "batchgate_policy_decisions_total",
    "What each policy did: mutated, denied, warned, passed, error.",
    ["policy", "outcome"],
    registry=REGISTRY,
)
BUNDLE_RELOADS = Counter(
    "batchgate_bundle_reloads_total",
    "Policy bundle (re)loads by result; a failed one keeps the last good bundle.",
    ["result"],
    registry=REGISTRY,
)
BUNDLE_INFO = Gauge(
    "batchgate_bundle_info",
    "The bundle in force (value 1) by content fingerprint.",
    ["fingerprint"],
    registry=REGISTRY,
)
CERT_RELOADS = Counter(
    "batchgate_certificate_reloads_total",
    "Serving certificate reloads by result.",
    ["result"],
    registry=REGISTRY,
)
CERT_EXPIRY = Gauge(
    "batchgate_certificate_expiry_timestamp_seconds",
    "Expiry of the serving certificate in use (Unix time).",
    registry=REGISTRY,
)

_children: dict[tuple[int, tuple[str, ...]], Any] = {}


def child(metric: Any, *labels: str) -> Any:
    """``metric.labels(*labels)``, memoized: ``labels()`` validates and locks on every call,
    which shows up on the admission hot path."""
    key = (id(metric), labels)
    found = _children.get(key)
    if found is None:
        found = _children[key] = metric.labels(*labels)
    return found
