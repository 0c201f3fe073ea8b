"""The loop: cache -> plan -> actuator, while this replica leads.

A pass runs when the cache changed (debounced to one per
``min_pass_interval``), when the plan's ``wake_at`` comes (the next warning or
deadline), and every ``resync_period`` regardless. The cache keeps running on
followers, so a new leader acts on a warm cache at once.

Nothing the loop knows is needed after a restart: the deadlines, warnings and
teardowns it has done are on the objects (annotations, deletionTimestamps) and
in Event names. A restart lists everything and plans from there, so a deadline
that passed while no reconciler ran is enforced on the first pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from . import metrics
from .actions import CONCERNS, TELL_ONCE, Action, Plan
from .actuator import Actuator, Outcome
from .cache import Cache
from .errors import KubeError, NotFound
from .lease import LeaderElector
from .ledger import Ledger
from .model import NAMESPACE, NODE, NodeView, Snapshot, node_view
from .planner import plan
from .publish import LabelPublisher
from .queue import queue_of, waits_alone
from .runtimes import History, finished_runs, remember
from .scavenger import phase_counts
from .settings import QueuePolicy, Settings

log = logging.getLogger(__name__)




@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """A planning pass allocates many small objects and frees nearly all of them by reference
    counting; the cyclic collector, run every few hundred allocations, would walk them (and the
    cache's long-lived objects) again and again for nothing. Off while it plans, back on after
    (also when the pass raises): what few cycles the pass, or another thread meanwhile, leaves are
    collected then. A collector someone else turned off stays off."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()

class Controller:
    def __init__(
        self,
        api: Any,
        settings: Settings,
        *,
        dry_run: bool = False,
        out: TextIO = sys.stdout,
        clock: Callable[[], float] = time.time,
        reload_policy: Callable[[], QueuePolicy | None] | None = None,
    ) -> None:
        self.api = api
        self.reload_policy = reload_policy
        self.settings = settings
        self.dry_run = dry_run
        self.out = out
        self.clock = clock
        self._dirty = threading.Event()
        self.stop_event = threading.Event()
        self.cache = Cache(api, settings, on_change=self._dirty.set, namespaces=bool(settings.namespace_labels))
        self.publisher = LabelPublisher(api, settings, self.cache.namespaces, clock)
        self.ledger = Ledger(api, settings.lease_namespace, clock)
        self.elector: LeaderElector | None = None
        if settings.leader_elect and not dry_run:
            self.elector = LeaderElector(api, settings, on_change=self._leadership)
        self.actuator = Actuator(api, settings, is_leader=self.may_act, observe=self.cache.observe,
                                 forget=self.cache.forget)
        self.passes = 0
        self.bundle_stale = False
        self._estimated_at = float("-inf")  # when the shadow schedule last ran (expected starts)
        self.history: History = {}  # runs seen since start (runtimes.py): predictions outlive deleted Jobs
        self.last_plan: Plan | None = None
        self._printed: set[tuple[str, str, str]] = set()
        # TELL_ONCE actions carried out (target uid, key): told once, not every pass (issue 27)
        self._told: OrderedDict[tuple[str, str], None] = OrderedDict()

    def may_act(self) -> bool:
        return not self.dry_run and (self.elector is None or self.elector.is_leader())

    def _leadership(self, leading: bool) -> None:
        metrics.LEADER.set(1 if leading else 0)
        self.ledger.reset()  # a new leader reads the stored usage before it writes
        if leading:
            self._dirty.set()  # act at once on the warm cache

    def _reload(self) -> None:
        """Pick up a changed bundle (queue maxima, excluded namespaces) at each resync."""
        if self.reload_policy is None:
            return
        qp = self.reload_policy()
        self.bundle_stale = qp is None  # the files do not load: keep acting on the last good one
        metrics.BUNDLE_STALE.set(1 if self.bundle_stale else 0)
        if qp is not None and qp != self.settings.queues:
            log.info("bundle changed: new queue policy")
            self.settings = dataclasses.replace(self.settings, queues=qp, queues_since=self.clock())

    # -- one pass --------------------------------------------------------------------
    def confirm_missing_nodes(self, snapshot: Snapshot) -> Snapshot:
        """The planner treats a node absent from the snapshot as gone (its pods lost). A
        watch can lag or miss a node, so each such absence is confirmed by a live read first:
        a node that exists goes into the cache; one that cannot be read this pass (an error,
        or past ``max_node_reads_per_pass``) counts as present, state unknown."""
        nodes = snapshot.nodes
        if nodes is None:
            return snapshot
        missing = sorted({p.node for p in snapshot.pods.values()
                          if p.node and p.node not in nodes and (p.group is not None or p.segment is not None)
                          and not p.deleting
                          and p.phase != "Succeeded"})
        if not missing:
            return snapshot
        known = dict(nodes)
        for i, name in enumerate(missing):
            if i >= self.settings.max_node_reads_per_pass:
                known[name] = NodeView(name, None)
                continue
            try:
                obj = self.api.get(NODE, None, name)
            except NotFound:
                log.info("node %s confirmed gone (live read: 404)", name)
                continue
            except KubeError as e:
                log.warning("node %s is not in the cache and cannot be read (%s); its pods are left alone", name, e)
                known[name] = NodeView(name, None)
                continue
            log.info("node %s was missing from the cache but exists", name)
            self.cache.observe(obj)
            known[name] = node_view(obj)
        return dataclasses.replace(snapshot, nodes=known)

    def plan_now(self) -> Plan:
        snapshot = self.confirm_missing_nodes(self.cache.snapshot())
        t = time.perf_counter()
        now = self.clock()
        estimate = now - self._estimated_at >= self.settings.expected_start_interval
        if estimate and self.settings.runtime_prediction:
            self.history = remember(self.history, finished_runs(snapshot))
        usage = self.ledger.billing(now, self.settings.queues)
        with collector_paused():
            result = plan(snapshot, now, self.settings, estimate=estimate, history=self.history, usage=usage,
                          told=self._told)
        if result.runs and self.settings.runtime_prediction:
            self.history = remember(self.history, result.runs)  # stopped at their limit, deleted now
        if estimate:
            self._estimated_at = now
        metrics.PLAN_SECONDS.observe(time.perf_counter() - t)
        self._count_unplannable(result)
        for name, n in self.cache.sizes().items():
            metrics.CACHED.labels(name).set(n)
        if snapshot.scavenger_jobs is not None:
            for phase, n in phase_counts(snapshot).items():
                metrics.SJ_PHASE.labels(phase).set(n)
        self._queue_metrics(snapshot, result, usage)
        self.last_plan = result
        return result

    def _queue_metrics(self, snapshot: Snapshot, result: Plan, usage: dict[str, float]) -> None:
        qp = self.settings.queues
        metrics.QUEUE_WAITING.clear()
        for queue_name, account in result.waiting:  # gathered by the pass (queue.waiting), not again
            metrics.QUEUE_WAITING.labels(queue_name, account).inc()
        metrics.QUEUE_UNGATED.clear()
        for p in snapshot.pods.values():
            if (not p.node and not p.gated and not p.terminal and waits_alone(p) and not qp.excluded(p.ref.namespace)
                    and (q := queue_of(p, qp)) in qp.gated):
                metrics.QUEUE_UNGATED.labels(q).inc()
        metrics.USAGE.clear()
        for account, v in usage.items():
            metrics.USAGE.labels(account).set(v)

    def account(self) -> str:
        """Sample usage into its ConfigMap when an interval has passed (ledger.py); the leader only."""
        if self.dry_run or not self.may_act():
            return "follower"
        qp = self.settings.queues
        if not qp.gated:
            return "disabled"  # no queue orders by fair share
        pods = [p for p in self.cache.snapshot().pods.values() if p.node and not qp.excluded(p.ref.namespace)]
        try:
            result = self.ledger.step(pods, qp, lambda p: qp.fair_share.account_of(p.ref.namespace),
                                      lambda p: queue_of(p, qp))
        except Exception:  # never let accounting stop the loop
            log.exception("storing usage failed")
            return "failed"
        if result != "unchanged":
            log.info("usage: %s", result)
        if result == "conflict":
            self._dirty.set()
        return result

    def _count_unplannable(self, result: Plan) -> None:
        """The gauge, by concern; a whole concern that failed is logged here, each object that cannot
        be planned when it is told (``run_pass``): its Event is the user's, the pass went on without it."""
        counts = dict.fromkeys(CONCERNS, 0)
        for u in result.unplannable:
            counts[u.concern] = counts.get(u.concern, 0) + 1
            if u.ref is None:
                log.error("planning %s failed this pass as a whole: %s", u.concern, u.error,
                          extra={"fields": {"concern": u.concern}})
        for concern, n in counts.items():
            metrics.UNPLANNABLE.labels(concern).set(n)

    def run_pass(self, trigger: str = "change") -> list[Outcome]:
        self.passes += 1
        metrics.PASSES.labels(trigger).inc()
        result = self.plan_now()
        if self.dry_run:
            self._print(result.actions)
            return []
        # An object that cannot be planned (or a pod that can never fit) is planned as such every
        # pass: told (and logged) once.
        actions = []
        for a in result.actions:
            if a.kind in TELL_ONCE and (a.target.uid, a.key) in self._told:
                continue
            if a.kind == "cannot-plan":
                log.warning("cannot plan %s: %s", a.target, a.message,
                            extra={"fields": {"kind": a.target.kind, "namespace": a.target.namespace,
                                              "name": a.target.name, "reason": a.reason}})
            actions.append(a)
        if not actions:
            return []
        outcomes = self.actuator.execute(actions)
        for o in outcomes:
            if o.action.kind in TELL_ONCE and o.result == "done":
                self._told[(o.action.target.uid, o.action.key)] = None
                if len(self._told) > 20_000:
                    self._told.popitem(last=False)
        return outcomes

    def publish(self) -> str:
        """The namespace labels the bundle's selectors read, into their ConfigMap (publish.py);
        the leader only. A conflict makes another pass come soon."""
        if self.dry_run or not self.may_act():
            return "follower"
        try:
            result = self.publisher.step(self.settings.queues.namespace_label_keys, self.settings.queues.bundle)
        except Exception:  # never let publishing stop the loop
            log.exception("publishing namespace labels failed")
            return "failed"
        if result == "conflict":
            self._dirty.set()
        return result

    def _print(self, actions: list[Action], *, all_: bool = False) -> None:
        for a in actions:
            key = (a.kind, a.target.uid, a.key)
            if all_ or key not in self._printed:
                self._printed.add(key)
                print(a.line(), file=self.out, flush=True)

    def setup_problem(self) -> str:
        """What makes acting pointless, said plainly: a ``--namespace`` that does not exist
        (listing it would just find nothing). Unknown when the namespace cannot be read."""
        ns = self.settings.namespace
        if not ns:
            return ""
        try:
            self.api.get(NAMESPACE, None, ns)
        except NotFound:
            return f"namespace {ns} does not exist (--namespace)"
        except KubeError as e:
            log.info("cannot check that namespace %s exists: %s", ns, e)
        return ""

    # -- --once ------------------------------------------------------------------------
    def run_once(self) -> int:
        """List everything, plan, act (or print, with dry_run). One reconciliation: passes repeat
        only while bookkeeping was held back (``max_bookkeeping_per_pass``). 0 when every
        action went through."""
        problem = self.setup_problem()
        if problem:
            print(f"batchgate: {problem}", file=sys.stderr, flush=True)
            return 2
        self.cache.list_once()
        if self.dry_run:
            self.settings = dataclasses.replace(self.settings, max_bookkeeping_per_pass=10**9)
            result = self.plan_now()
            self._print(result.actions, all_=True)
            if not result.actions:
                print("nothing to do", file=self.out)
            return 0
        if self.elector is not None and not self.elector.try_once():
            lease = f"{self.settings.lease_namespace}/{self.settings.lease_name}"
            if self.elector.last_error:
                print(f"batchgate: lease {lease}: {self.elector.last_error}", file=sys.stderr, flush=True)
                return 2
            log.error("lease %s is held by %s; not acting (use --no-leader-elect to act anyway)",
                      lease, self.elector.holder or "?")
            return 1
        outcomes: list[Outcome] = []
        try:
            outcomes = self.run_pass("once")
            for _ in range(1000):
                if self.last_plan is None or not self.last_plan.deferred:
                    break
                if self.elector is not None and not self.elector.try_once():
                    break
                outcomes += self.run_pass("once")
            for _ in range(3):  # a conflict re-reads the ConfigMap and tries again
                if self.publish() != "conflict":
                    break
            for _ in range(3):
                if self.account() not in ("conflict", "unchanged"):
                    break
        finally:
            if self.elector is not None:
                self.elector.release()
        bad = [o for o in outcomes if o.result in ("failed", "skipped")]
        return 1 if bad else 0

    # -- forever ------------------------------------------------------------------------
    def stop(self) -> None:
        self.stop_event.set()
        self._dirty.set()

    def run(self) -> int:
        s = self.settings
        if problem := self.setup_problem():
            log.error("%s; watching anyway, in case it is created", problem)
        self.cache.start()
        elector_thread = None
        if self.elector is not None:
            elector_thread = threading.Thread(target=self.elector.run, args=(self.stop_event,),
                                              name="leader-elector", daemon=True)
            elector_thread.start()
        try:
            while not self.cache.wait_synced(timeout=1.0):
                if self.stop_event.is_set():
                    return 0
            log.info("cache synced", extra={"fields": self.cache.sizes()})
            last_pass = 0.0
            next_resync = time.monotonic()
            wake_at: float | None = None
            while not self.stop_event.is_set():
                now_m = time.monotonic()
                timeout = max(next_resync - now_m, 0.0)
                if wake_at is not None:
                    timeout = min(timeout, max(wake_at - self.clock(), 0.0))
                if (due := self.publisher.due_at()) is not None and self.may_act():
                    timeout = min(timeout, max(due - self.clock(), 0.0))
                fired = self._dirty.wait(timeout)
                if self.stop_event.is_set():
                    break
                gap = last_pass + s.min_pass_interval - time.monotonic()
                if gap > 0:
                    self.stop_event.wait(gap)  # let a burst of changes settle
                    if self.stop_event.is_set():
                        break
                self._dirty.clear()
                now_m = time.monotonic()
                trigger = "change" if fired else ("resync" if now_m >= next_resync else "timer")
                if now_m >= next_resync:
                    next_resync = now_m + s.resync_period
                    self._reload()
                if not self.may_act() and not self.dry_run:
                    wake_at = None
                    continue
                last_pass = now_m
                try:
                    outcomes = self.run_pass(trigger)
                except Exception:
                    log.exception("pass failed")
                    self._dirty.set()
                    continue
                self.publish()
                self.account()
                wake_at = self.last_plan.wake_at if self.last_plan is not None else None
                if (due := self.ledger.due_at(self.settings.queues)) is not None:
                    wake_at = due if wake_at is None else min(wake_at, due)
                if self.last_plan is not None and self.last_plan.deferred:
                    self._dirty.set()  # the held-back bookkeeping, next
                if any(o.result == "conflict" for o in outcomes):
                    self._dirty.set()  # re-plan on what was re-read (after min_pass_interval)
                if any(o.result == "failed" for o in outcomes):
                    retry = self.clock() + s.retry_failed
                    wake_at = retry if wake_at is None else min(wake_at, retry)
            return 0
        finally:
            self.stop_event.set()
            self.cache.stop()
            if self.elector is not None:
                if elector_thread is not None:
                    elector_thread.join(timeout=5)
                self.elector.release()
