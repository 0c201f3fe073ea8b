"""Prometheus metrics of the reconciler (its own registry, served on ``--metrics-port``).

Every action counts once in ``batchgate_reconciler_actions_total`` by kind and
outcome (done, conflict, gone, failed, skipped), next to the Event it leaves on
the object; ``batchgate_reconciler_api_writes_total`` counts every write request
sent (lease renewals apart), which is what "a steady cluster causes zero writes
per resync" is measured by.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

ACTIONS = Counter(
    "batchgate_reconciler_actions_total", "Actions carried out, by kind and outcome.",
    ["kind", "outcome"], registry=REGISTRY,
)
WRITES = Counter(
    "batchgate_reconciler_api_writes_total", "API write requests sent for actions (Events included).",
    ["verb", "resource"], registry=REGISTRY,
)
PASSES = Counter(
    "batchgate_reconciler_passes_total", "Planning passes, by what started them.", ["trigger"], registry=REGISTRY,
)
PLAN_SECONDS = Histogram(
    "batchgate_reconciler_plan_seconds", "Time to plan one pass.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0), registry=REGISTRY,
)
LEADER = Gauge("batchgate_reconciler_leader", "1 while this replica holds the lease.", registry=REGISTRY)
CACHED = Gauge("batchgate_reconciler_cached_objects", "Objects in the cache.", ["resource"], registry=REGISTRY)
RELISTS = Counter(
    "batchgate_reconciler_relists_total", "Full lists by the cache (start, 410 Gone, errors).", ["resource"],
    registry=REGISTRY,
)
BUNDLE_STALE = Gauge(
    "batchgate_reconciler_bundle_stale",
    "1 while the policy files on disk do not load and the last good bundle's queue policy stays in force.",
    registry=REGISTRY,
)

UNPLANNABLE = Gauge(
    "batchgate_reconciler_unplannable_objects",
    "Objects the last planning pass could not plan, by concern (each has a CannotPlan Warning Event; the "
    "rest of the pass went on). 'none' as object: a whole concern failed for one pass.",
    ["concern"], registry=REGISTRY,
)
UNREADABLE = Counter(
    "batchgate_reconciler_unreadable_objects_total",
    "Objects the cache could not turn into a view and left out (logged with their name), by resource.",
    ["resource"], registry=REGISTRY,
)

NAMESPACE_LABELS_PUBLISHED = Counter(
    "batchgate_reconciler_namespace_labels_publish_total",
    "Writes of the namespace labels ConfigMap (batchgate-namespaces) by result: created, updated, "
    "conflict, failed, too-large (not written: past the size limit).",
    ["result"], registry=REGISTRY,
)
NAMESPACE_LABELS_BYTES = Gauge(
    "batchgate_reconciler_namespace_labels_bytes",
    "Size of the namespace labels document last computed (the ConfigMap takes at most ~900 KiB of it).",
    registry=REGISTRY,
)

# -- ScavengerJobs ------------------------------------------------------------------
SJ_STARTED = Counter("batchgate_scavengerjobs_started_total",
                     "ScavengerJobs whose pods all ran, after waiting (first start or after an interruption).",
                     registry=REGISTRY)
SJ_COMPLETED = Counter("batchgate_scavengerjobs_completed_total", "ScavengerJobs completed.", registry=REGISTRY)
SJ_FAILED = Counter("batchgate_scavengerjobs_failed_total", "ScavengerJobs failed for good.", registry=REGISTRY)
SJ_INTERRUPTED = Counter("batchgate_scavengerjobs_interrupted_total",
                         "Interruptions (preempted, evicted, deleted from outside, node lost).", registry=REGISTRY)
SJ_SEGMENTS = Counter("batchgate_scavengerjobs_segments_total",
                      "Segment boundaries (checkpoint, then the next segment's pods).", registry=REGISTRY)
SJ_LOST = Counter("batchgate_scavengerjobs_preempted_core_seconds_total",
                  "CPU core-seconds computed since the last segment start by interrupted ScavengerJobs "
                  "(an upper bound of the work lost to preemption).", registry=REGISTRY)
SJ_WAIT = Histogram("batchgate_scavengerjobs_wait_seconds",
                    "From queued (created, or interrupted) to all pods running.",
                    buckets=(10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600), registry=REGISTRY)
SJ_PHASE = Gauge("batchgate_scavengerjobs", "ScavengerJobs by phase.", ["phase"], registry=REGISTRY)


# The batch queue (queue.py, ledger.py)
QUEUE_WAITING = Gauge("batchgate_queue_waiting_workloads", "Workloads waiting in batchgate's queue.",
                      ["queue", "account"], registry=REGISTRY)
QUEUE_RELEASED = Counter("batchgate_queue_released_total", "Pods and Jobs released from the queue.",
                         registry=REGISTRY)
QUEUE_WAIT = Histogram("batchgate_queue_wait_seconds", "From creation to release, per workload released.",
                       buckets=(1, 10, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 7 * 86400), registry=REGISTRY)
QUEUE_UNGATED = Gauge("batchgate_queue_ungated_pods",
                      "Pending pods in a gated queue that carry no gate (admitted while the webhook was down): bare "
                      "pods and those of ReplicaSets, StatefulSets and DaemonSets.",
                      ["queue"], registry=REGISTRY)
USAGE = Gauge("batchgate_usage_billing", "Each account's decayed usage (weighted resource-seconds).", ["account"],
              registry=REGISTRY)
USAGE_WRITES = Counter("batchgate_usage_writes_total",
                       "Samples of usage stored, by outcome (written, conflict, broken, failed).", ["result"],
                       registry=REGISTRY)


def scavenger_action(kind: str, amount: float) -> None:
    """Count a ScavengerJob transition that went through."""
    if kind == "sj-running":
        SJ_STARTED.inc()
        SJ_WAIT.observe(max(amount, 0.0))
    elif kind == "sj-completed":
        SJ_COMPLETED.inc()
    elif kind == "sj-failed":
        SJ_FAILED.inc()
    elif kind == "sj-interrupted":
        SJ_INTERRUPTED.inc()
        SJ_LOST.inc(max(amount, 0.0))
    elif kind == "sj-segment":
        SJ_SEGMENTS.inc()
    elif kind == "release":
        QUEUE_RELEASED.inc()
        QUEUE_WAIT.observe(max(amount, 0.0))
