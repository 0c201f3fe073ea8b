"""Reconciler settings: one frozen dataclass, every default documented.

``batchgate reconcile`` builds it from its flags and the bundle; tests build it
directly. Durations are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..bundle import FairShare, Scavengers
from ..globs import matches
from ..jobnet import Isolation
from ..kubefields import DEFAULT_SCHEDULER

if TYPE_CHECKING:
    from ..bundle import Bundle


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """What the planner needs from the bundle: queue maxima and how a namespace picks its default queue."""

    max_time_limit: dict[str, int | None] = field(default_factory=dict)
    default_queue: str = ""
    # (name globs, queue or None), first match wins, as in the bundle (a matching rule
    # without a default queue means the bundle's default, not the next rule's)
    namespace_defaults: tuple[tuple[tuple[str, ...], str | None], ...] = ()
    excluded_namespaces: tuple[str, ...] = ()
    # ScavengerJobs: the bundle's spec.scavengers as the bundle read it, and what their queue's
    # declaration gives their Jobs
    scavengers: Scavengers = field(default_factory=Scavengers)
    scavenger_class: str = "batchgate-scavenger"
    scavenger_node_selector: tuple[tuple[str, str], ...] = ()
    # the job-network policy's namespace rules: which namespaces get NetworkPolicies (none: off)
    isolation: tuple[Isolation, ...] = ()
    # the namespace label keys queue grants select by (publish.py publishes those), and the bundle
    # they were taken from (informational: a bundle edit that changes no key changes nothing here)
    namespace_label_keys: tuple[str, ...] = ()
    # the batch queue (queue.py): the gated queues, each queue's state, the priority classes' values
    # (a queued Job's pods have none yet), and fair share
    gated: tuple[str, ...] = ()
    states: dict[str, str] = field(default_factory=dict)
    easy: frozenset[str] = frozenset()  # queues with backfill: easy (only the head reserves)
    fair_promises: frozenset[str] = frozenset()  # queues with promise: fair-share (not held as deadlines)
    # queues with backfill: start-by (work starts ahead of its turn if it delays no start-by)
    start_by_backfill: frozenset[str] = frozenset()
    class_values: dict[str, int] = field(default_factory=dict)
    queue_classes: dict[str, str] = field(default_factory=dict)  # queue -> its priority class
    fair_share: FairShare = field(default_factory=FairShare)
    # the schedulerNames kube-scheduler serves (spec.kubeSchedulerProfiles): only a pending pod naming
    # one of them is placed as kube-scheduler's (shadow.py)
    kube_schedulers: frozenset[str] = frozenset({DEFAULT_SCHEDULER})
    bundle: str = field(default="", compare=False)

    @staticmethod
    def from_bundle(bundle: Bundle) -> QueuePolicy:
        sv = bundle.scavengers
        sq = bundle.queues.get(sv.queue)
        return QueuePolicy(
            scavengers=sv,
            scavenger_class=sq.priority_class if sq else "",
            scavenger_node_selector=tuple(sorted(sq.node_selector.items())) if sq else (),
            max_time_limit={q.name: q.max_time_limit for q in bundle.queues.values()},
            default_queue=bundle.default_queue,
            namespace_defaults=tuple((r.names, r.default_queue) for r in bundle.namespaces),
            excluded_namespaces=tuple(bundle.excluded_namespaces),
            isolation=next((tuple(p.settings.isolation) for p in bundle.policies
                            if p.rule.name == "job-network"), ()),
            namespace_label_keys=bundle.selector_keys,
            gated=tuple(q.name for q in bundle.queues.values() if q.gated),
            states={q.name: q.state for q in bundle.queues.values()},
            easy=frozenset(q.name for q in bundle.queues.values() if q.backfill == "easy"),
            fair_promises=frozenset(q.name for q in bundle.queues.values() if q.promise == "fair-share"),
            start_by_backfill=frozenset(q.name for q in bundle.queues.values() if q.backfill == "start-by"),
            class_values={c.name: c.value for c in bundle.priority_classes.values()},
            queue_classes={q.name: q.priority_class for q in bundle.queues.values()},
            fair_share=bundle.fair_share,
            kube_schedulers=frozenset(bundle.kube_scheduler_profiles),
            bundle=bundle.fingerprint,
        )

    def isolation_for(self, namespace: str) -> Isolation | None:
        return next((r for r in self.isolation if matches(r.namespaces, namespace)), None)

    def queue_for(self, namespace: str, label: str | None) -> str:
        if label:
            return label
        for globs, queue in self.namespace_defaults:
            if matches(globs, namespace):
                return queue or self.default_queue
        return self.default_queue

    def excluded(self, namespace: str) -> bool:
        return matches(self.excluded_namespaces, namespace)


@dataclass(frozen=True, slots=True)
class Settings:
    # -- planning ------------------------------------------------------------
    warning_lead: int = 600
    """Seconds before a deadline that the TimeLimitApproaching Warning Event is sent."""
    enforce_queue_max: bool = True
    """Cap a job's time limit at its queue's maximum, should one slip past the webhook
    (admitted while it was down, or under an older bundle)."""
    teardown_interrupted_groups: bool = True
    """When a pod of a group is interrupted (evicted, preempted, lost with its node), delete
    the rest of the group too, so that the Job starts all of them over together."""
    max_bookkeeping_per_pass: int = 500
    """At most this many record-deadline and PodGroup create/update actions per pass; the
    rest follow in the next pass, right after. Stops, warnings and teardowns are never held
    back. Keeps a first start on a big cluster (thousands of jobs to record) from planning
    and then working through minutes of writes while new deadlines fall due."""
    queues: QueuePolicy = field(default_factory=QueuePolicy)
    max_node_reads_per_pass: int = 50
    """Live reads per pass confirming that a node missing from the cache is really gone
    before its pods count as lost; the rest wait for the next pass."""
    queues_since: float | None = None
    """When the reconciler took up ``queues`` (epoch s; set at start and on a bundle change).
    A job that the queue maximum would stop sooner than ``warning_lead`` after it is warned
    first and stopped then; None: no such grace (tests)."""
    countdown_slack: float = 120.0
    """Seconds held back when a node's maintenance countdown label is written (at least; 2 % of
    the time left when that is more), so the label understates the minutes left."""
    countdown_guard: float = 30.0
    """The countdown is rewritten this many seconds before it would overstate the time left."""
    expected_start: bool = True
    """Keep batchgate.io/expected-start on pending workloads (the shadow schedule)."""
    runtime_prediction: bool = True
    """Expect work to run as long as earlier runs of the same kind did (runtimes.py), not to its
    time limit, in the shadow schedule (deadlines always use the limit)."""
    expected_start_interval: float = 60.0
    """The shadow schedule runs in at most one pass per this many seconds."""
    expected_start_slack: float = 300.0
    """An estimate is rewritten (with an Event) only when it moves by more than this many seconds."""
    drain_timeout: float = 900.0
    """Seconds after a maintenance window's start during which evictions honour
    PodDisruptionBudgets; after that a pod still on the node is deleted (``--drain-timeout``)."""

    # -- the loop ------------------------------------------------------------
    resync_period: float = 300.0
    """Seconds between planning passes when nothing changes (passes also run on every
    change, and when the next deadline or warning falls due)."""
    min_pass_interval: float = 1.0
    """At most one pass per this many seconds, however busy the watch streams are."""
    namespace: str | None = None
    """Watch and act in this namespace only; None: the whole cluster."""
    watch_timeout: int = 300
    """Server-side timeout of one watch request; the reflector re-watches from the last
    resourceVersion afterwards (a 410 Gone makes it relist)."""
    crd_recheck: float = 60.0
    """Seconds between checks for the PodGroup CRD while it is not installed."""

    # -- namespace labels for queue grants by namespaceSelector (publish.py) ----
    namespace_labels: str = "batchgate-namespaces"
    """The ConfigMap (in ``lease_namespace``, batchgate's own) the leader publishes the labels that
    the bundle's selectors read into; the webhook mounts it. Empty: publish nothing."""
    namespace_labels_refresh: float = 300.0
    """``publishedAt`` is rewritten at least this often, changed or not: the webhook treats labels
    older than its ``--namespace-labels-max-age`` (15m) as stale."""

    # -- the API -------------------------------------------------------------
    api_attempts: int = 4
    """Tries per API write on transient errors (no response, 429, 5xx)."""
    api_backoff: float = 0.2
    """First retry pause in seconds; doubles per try, with jitter."""
    request_timeout: float = 30.0
    retry_failed: float = 10.0
    """Seconds until a pass retries actions that failed for good (e.g. forbidden)."""

    # -- leader election (coordination.k8s.io/v1 Lease) -----------------------
    leader_elect: bool = True
    lease_name: str = "batchgate-reconciler"
    lease_namespace: str = "batchgate-system"
    identity: str = ""
    """This replica's name in the Lease; main() defaults it to hostname_pid."""
    lease_duration: float = 15.0
    """Others take over when the holder has not renewed for this long."""
    renew_deadline: float = 10.0
    """The leader stops acting when it could not renew for this long (< lease_duration,
    so it has stopped before anyone else may start)."""
    retry_period: float = 2.0
    """Seconds between tries to acquire or renew."""

    # -- observability ---------------------------------------------------------
    metrics_port: int = 0
    """Serve Prometheus /metrics on this port; 0: do not serve."""
    crash_after_writes: int | None = None
    """Test hook (env BATCHGATE_RECONCILER_CRASH_AFTER_WRITES): exit abruptly (status 137)
    right after the n-th successful API write, to prove that a restart at any point
    neither misses nor repeats anything."""
