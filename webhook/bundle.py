"""The policy bundle: load, validate once, and hold as frozen data.

A bundle is a directory::

    bundle.yaml            queues, priority classes, admins, exclusions, namespace defaults
    <policy>/policy.yaml   one folder per policy (plus README.md, suite.yaml, samples/)

Everything is checked here, at load time, with errors that name file, line and
field; a request is never failed because of a bad bundle. Nothing in this module
touches the network, the clock or aiohttp.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from .contract import API_VERSION, GROUP
from .globs import matches, matches_any
from .kubefields import DEFAULT_SCHEDULER
from .nsfacts import NO_FACTS, OPERATORS, NamespaceSelector, NamespaceView, selector_keys
from .objectmeta import DNS_SUBDOMAIN
from .units import parse_duration
from .wire import OPERATIONS
from .workloads import WORKLOAD_KINDS, Shape
from .yamlsrc import BundleError, Node, read_file

if TYPE_CHECKING:
    from .draft import Draft

__all__ = ["Bundle", "BundleError", "Ctx", "Finding", "RuleType", "default_policies", "load_bundle"]
_REPO = Path(__file__).resolve().parent.parent


def shipped(name: str) -> Path:
    """``name``/ (policies, manifests) of a source checkout (also an editable install); an
    installed wheel (and the image built from it) carries the same files inside the package as
    webhook/``name`` (pyproject.toml maps them in)."""
    in_repo = _REPO / name
    return in_repo if (_REPO / "pyproject.toml").is_file() and in_repo.is_dir() else Path(__file__).resolve().parent / name


# The default bundle: policies/ of a source checkout, else the copy inside the package.
DEFAULT_POLICIES = shipped("policies")
POLICIES_ENV = "BATCHGATE_POLICIES"
DEFAULT_EXCLUDED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "batchgate-system")
NAME = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
LABEL_KEY = r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
FailurePolicy = Literal["Ignore", "Fail"]
K = TypeVar("K")
V = TypeVar("V")
S = TypeVar("S")  # a policy type's settings


def default_policies() -> str:
    """The bundle directory when none is given: $BATCHGATE_POLICIES, else the bundled one."""
    return os.environ.get(POLICIES_ENV) or str(DEFAULT_POLICIES)


# -- policy types: what a policy is of (``spec.type``) -----------------------
# Defined here, where a policy holds its type; the types themselves (one module each under
# webhook/rules/, on rules/base.py) live a layer up, with the engine that runs them, and
# webhook.rules.load_bundle loads a bundle with all of them.
@dataclass(frozen=True, slots=True)
class Finding:
    severity: Literal["warn", "deny"]
    message: str


@dataclass(slots=True)  # not frozen: built on every request, and frozen __init__ is slow
class Ctx:
    """Everything about one request that a rule may look at."""

    operation: str
    group: str
    version: str
    kind: str
    namespace: str
    name: str  # may be empty: controllers create Pods with only generateName
    username: str
    groups: tuple[str, ...]
    dry_run: bool
    bundle: Bundle
    shape: Shape | None  # None for kinds without a pod template (e.g. ScavengerJob)
    queue_name: str  # the queue asked for (label) or defaulted
    queue: Queue | None  # None when queue_name is not declared in the bundle
    queue_explicit: bool  # the user set the queue label
    namespace_rule: NamespaceRule | None  # the bundle's rule for this namespace, if any
    admin: bool  # in the bundle's admins
    from_controller: bool  # a Pod (or ReplicaSet, Job) that a listed controller made from its owner
    old_object: dict[str, Any] | None
    # Made by a controller from a template this webhook judged as its writer (the seal verifies,
    # or an owner batchgate does not seal): checks that depend on who asks are not made again.
    # A controller's object whose template is not sealed is judged with no one's grants
    # (``unsealed``: username "" in group system:authenticated, not an admin).
    trusted: bool = False
    unsealed: bool = False
    # UPDATE: the old object's pod template was judged (its seal verifies); an UPDATE of one that
    # was not is judged whole, as a CREATE, not only for what it adds.
    old_judged: bool = True

    @property
    def subject(self) -> str:
        """How messages name the object: ``Job demo/mpi-sim2``."""
        return f"{self.kind} {self.namespace}/{self.name or '(generated name)'}"


@dataclass(frozen=True, slots=True)
class RuleType(Generic[S]):
    """A policy type: a settings parser (run once, at bundle load: ``spec.settings`` -> ``S``)
    and a ``mutate`` and/or ``validate`` function (run per request) that get those settings."""

    name: str
    doc: str
    parse: Callable[[Node, Bundle], S]
    mutate: Callable[[S, Draft, Ctx], list[Finding]] | None = None
    validate: Callable[[S, dict[str, Any], Ctx], list[Finding]] | None = None
    default_kinds: tuple[tuple[str, str, str], ...] = WORKLOAD_KINDS
    default_operations: tuple[str, ...] = ("CREATE",)
    mutate_operations: tuple[str, ...] = ("CREATE",)
    mutate_update_kinds: tuple[str, ...] | None = None  # the kinds it mutates on UPDATE; None: all it matches
    # Decides the pod (or pod template): runs on every kind that makes pods, and on UPDATE only
    # where the pod template may change and did (the engine skips it otherwise).
    decides_pod: bool = False
    default_failure_policy: FailurePolicy = "Ignore"
    # Its validate skips objects a controller made from a sealed template (``ctx.trusted``): the
    # webhook seals a template only when this check passes on it (webhook.seal).
    sealed_check: bool = False
    order: int = 50  # mutating policies run in this order (then by name)
    # The namespace label keys its settings select namespaces by (job-network's isolation proxy):
    # namespace-opt-out keeps them admins' to set, as it does the keys queue grants read.
    namespace_label_keys: Callable[[S], tuple[str, ...]] | None = None
    # Judges an UPDATE of a Pod through its ``pods/resize`` subresource (in-place resize, Kubernetes
    # 1.33+: only container resources change): the engine runs this, not ``validate``, and only
    # policies that have it; every other subresource is left alone.
    resize: Callable[[S, dict[str, Any], Ctx], list[Finding]] | None = None


# -- the data ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    preemption_policy: Literal["PreemptLowerPriority", "Never"]
    description: str
    admin_only: bool = False
    global_default: bool = False


@dataclass(frozen=True, slots=True)
class Grant:
    """One entry of a queue's ``access``: callers in ``namespaces`` (names/globs; empty: any)
    whose labels match ``selector`` (if any; as published by the reconciler, see nsfacts) who
    are one of ``users``, ``groups`` or ``serviceAccounts`` (globs; all empty: anyone)."""

    namespaces: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()  # "namespace/name" globs
    selector: NamespaceSelector | None = None

    def admits(self, namespace: str, user: str, groups: tuple[str, ...], facts: NamespaceView = NO_FACTS) -> bool:
        if self.namespaces and not matches(self.namespaces, namespace):
            return False
        if self.selector is not None and not facts.selects(self.selector, namespace):
            return False
        return self.admits_caller(user, groups)

    def admits_caller(self, user: str, groups: tuple[str, ...]) -> bool:
        """The identities alone (none listed: anyone)."""
        if not (self.users or self.groups or self.service_accounts):
            return True
        return (matches(self.users, user) or matches_any(self.groups, groups)
                or matches(self.service_accounts, _service_account(user)))

    def describe(self) -> str:
        """``groups hpc-gpu or users bob in namespaces gpu-*``."""
        who = " or ".join(f"{what} {', '.join(names)}" for what, names in (
            ("users", self.users), ("groups", self.groups), ("service accounts", self.service_accounts)) if names)
        where = f"namespaces {', '.join(self.namespaces)}" if self.namespaces else ""
        if self.selector is not None:
            where = f"{where or 'namespaces'} labelled {self.selector.describe()}"
        if who and where:
            return f"{who} in {where}"
        return who or where or "everyone"


@dataclass(frozen=True, slots=True)
class Access:
    """Who may use a queue (or whole nodes in it), as Slurm's AllowGroups/AllowAccounts: any
    one grant admits. No grants (``none`` in bundle.yaml): only the bundle's admins."""

    grants: tuple[Grant, ...] = ()

    def admits(self, namespace: str, user: str, groups: tuple[str, ...], facts: NamespaceView = NO_FACTS) -> bool:
        return any(g.admits(namespace, user, groups, facts) for g in self.grants)

    def why_not(self, namespace: str, user: str, groups: tuple[str, ...], facts: NamespaceView) -> str:
        """Why a grant by namespace labels that would otherwise admit this caller here could not be
        judged ('' when there is none: retrying would not help)."""
        for g in self.grants:
            if (g.selector is not None and (not g.namespaces or matches(g.namespaces, namespace))
                    and g.admits_caller(user, groups)):
                why = facts.why_not(g.selector, namespace)
                if why:
                    return why
        return ""

    def describe(self) -> str:
        if not self.grants:
            return "the bundle's admins only"
        return "; or ".join(g.describe() for g in self.grants)


@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    priority_class: str
    scavenger: bool
    default_time_limit: int | None  # seconds
    max_time_limit: int | None
    node_selector: dict[str, str]
    access: Access | None = None  # who may use the queue; None: everyone
    exclusive_access: Access | None = None  # who may take whole nodes in it; None: whoever may use it
    # gang: always - every Job running more than one pod at a time is a gang (pod-group policy)
    # unless it says batchgate.io/gang: "false"; auto - only those that ask or whose shape needs it.
    gangs: bool = False
    # The batch queue (docs/admin/queues.md): whether its work waits behind batchgate's gate until the
    # reconciler releases it, and its state (open: admit and release; hold: admit, release nothing;
    # drain: refuse new work, release what waits; stop: refuse and release nothing), with the
    # admin's reason, which refusals quote.
    gated: bool = True
    state: str = "open"
    state_reason: str = ""
    # how its waiting work is backfilled (docs/admin/queues.md): conservative, every waiting workload
    # reserves room and nothing starts that delays any reservation; easy, only the head reserves;
    # start-by, as conservative, each reservation its published start-by (needs promise: deadline)
    backfill: str = "conservative"
    # what its promises (batchgate.io/start-by) hold against (docs/admin/queues.md): deadline, later work
    # of the same priority goes ahead only while the promise still holds and a start-by never moves
    # earlier; fair-share, fair share ranks later work ahead whatever it does to the promise
    promise: str = "deadline"


QUEUE_STATES = ("open", "hold", "drain", "stop")
BACKFILLS = ("conservative", "easy", "start-by")
PROMISES = ("deadline", "fair-share")


@dataclass(frozen=True, slots=True)
class Account:
    """``spec.fairShare.accounts[]``: the namespaces whose usage counts together, and their shares."""

    name: str
    namespaces: tuple[str, ...]  # names or globs
    shares: float


@dataclass(frozen=True, slots=True)
class FairShare:
    """``spec.fairShare``: how the queue orders waiting work after priority (Slurm's multifactor,
    classic fair-share factor ``2^(-usage/shares)``; docs/admin/queues.md)."""

    half_life: int = 7 * 86400  # usage decays by half in this many seconds
    interval: int = 60  # usage is sampled (and stored) this often
    # what a second of one unit of each resource costs (Slurm's TRESBillingWeights): cpu per core,
    # memory per GiB, extended resources per unit
    weights: tuple[tuple[str, float], ...] = (("cpu", 1.0), ("memory", 0.25), ("nvidia.com/gpu", 10.0))
    accounts: tuple[Account, ...] = ()  # namespaces not listed are accounts of their own, 1 share each
    age_weight: float = 1.0  # how much a full max_age adds to the fair-share factor (which is 0..1)
    max_age: int = 7 * 86400  # the age factor grows to 1 over this many seconds, then stays

    def account_of(self, namespace: str) -> str:
        return next((a.name for a in self.accounts if matches(a.namespaces, namespace)), namespace)

    def shares_of(self, account: str) -> float:
        return next((a.shares for a in self.accounts if a.name == account), 1.0)


@dataclass(frozen=True, slots=True)
class Scavengers:
    """``spec.scavengers``: how the reconciler runs ScavengerJobs (its settings hold this, as read
    here: durations in seconds, work in core-seconds)."""

    queue: str = "scavenger"  # the (scavenger) queue their Jobs run in
    max_share: float = 0.7  # of the allocatable cpu and memory of the nodes that queue may use
    unschedulable_timeout: int = 300  # seconds a started Job's pods may stay unscheduled before it waits again
    grace_period: int = 60  # seconds between SIGTERM and SIGKILL when a segment ends or it is interrupted
    guard: float = 0.0  # core-seconds of unsaved work from which a running segment gets a PDB (0: never)


def _default_scavenger_queue(queues: Mapping[str, Queue]) -> str:
    """The queue ScavengerJobs run in when ``spec.scavengers.queue`` names none: the scavenger
    queue named ``scavenger``, else the first scavenger queue; with none declared, ``scavenger``
    (not a queue: a ScavengerJob is refused for it)."""
    name = Scavengers().queue
    if (q := queues.get(name)) is not None and q.scavenger:
        return name
    return next((q.name for q in queues.values() if q.scavenger), name)


def parse_core_minutes(text: str) -> float:
    """``20`` or ``2.5`` core-minutes -> core-seconds (1200.0, 150.0); raises ValueError unless a
    finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0 <= value < float("inf"):
        raise ValueError(f"{text!r} is not a number >= 0")
    return value * 60


def parse_share(text: object) -> float:
    """``70%`` or ``0.7`` -> 0.7; raises ValueError unless 0 < share <= 1."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"{text!r} is not a share")
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not a share") from None
    if not 0 < value <= 1:
        raise ValueError(f"{raw} is not over 0 and at most 100%")
    return value


@dataclass(frozen=True, slots=True)
class NamespaceRule:
    """Defaults for namespaces whose name matches one of ``names`` (globs)."""

    names: tuple[str, ...]
    default_queue: str | None
    allowed_queues: tuple[str, ...] | None
    node_selector: dict[str, str]

    def matches(self, namespace: str) -> bool:
        return matches(self.names, namespace)


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: dict[str, str]
    match_expressions: tuple[tuple[str, str, frozenset[str]], ...]

    def matches(self, labels: dict[str, str]) -> bool:
        for k, v in self.match_labels.items():
            if labels.get(k) != v:
                return False
        for key, op, values in self.match_expressions:
            present = key in labels
            if op == "In" and (not present or labels[key] not in values):
                return False
            if op == "NotIn" and present and labels[key] in values:
                return False
            if op == "Exists" and not present:
                return False
            if op == "DoesNotExist" and present:
                return False
        return True


@dataclass(frozen=True, slots=True)
class Match:
    """Which requests a policy applies to; empty fields match everything."""

    kinds: tuple[tuple[str, str, str], ...] = ()  # (group, version, kind), "*" wildcards
    operations: tuple[str, ...] = ("CREATE",)
    namespaces: tuple[str, ...] = ()
    selector: LabelSelector | None = None
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()  # "namespace/name" globs
    subject_free: bool = field(init=False, compare=False, repr=False)  # no namespace/label/user filter

    def __post_init__(self) -> None:
        free = not (self.namespaces or self.selector or self.users or self.groups or self.service_accounts)
        object.__setattr__(self, "subject_free", free)

    def matches_kind(self, group: str, version: str, kind: str) -> bool:
        return not self.kinds or any(
            (g == "*" or g == group) and (v == "*" or v == version) and (k == "*" or k == kind)
            for g, v, k in self.kinds
        )

    def matches_subject(self, namespace: str, labels: dict[str, str], user: str, groups: list[str] | tuple[str, ...]) -> bool:
        if self.namespaces and not matches(self.namespaces, namespace):
            return False
        if self.selector is not None and not self.selector.matches(labels):
            return False
        if self.users and not matches(self.users, user):
            return False
        if self.groups and not matches_any(self.groups, groups):
            return False
        return not self.service_accounts or matches(self.service_accounts, _service_account(user))


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    version: int
    description: str
    rule: RuleType[Any]
    settings: Any  # what rule.parse made of spec.settings
    match: Match
    exclude: Match | None
    failure_policy: FailurePolicy
    path: str  # the policy folder, for suites and error messages


@dataclass(frozen=True, slots=True)
class Principals:
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()
    _seen: dict[tuple[str, tuple[str, ...]], bool] = field(
        default_factory=dict, init=False, compare=False, repr=False)

    def contains(self, user: str, groups: list[str] | tuple[str, ...]) -> bool:
        """Memoized per (user, groups): a cluster has few distinct callers, and every
        request asks twice (admins, controllers)."""
        key = (user, tuple(groups))
        found = self._seen.get(key)
        if found is None:
            found = _remember(self._seen, key, len(user) + sum(len(g) + 8 for g in groups), (
                matches(self.users, user)
                or matches_any(self.groups, groups)
                or matches(self.service_accounts, _service_account(user))
            ))
        return found


MEMO_LIMIT = 4096  # distinct keys kept per memo; past it the memo starts over
MEMO_KEY_LIMIT = 1024  # characters in a key; longer keys (never real names) are not kept


def _remember(memo: dict[K, V], key: K, size: int, value: V) -> V:
    """Store ``value`` in a bounded memo: a flood of distinct keys (users, namespaces)
    costs a re-computation, never unbounded memory; a key of ``size`` characters past
    MEMO_KEY_LIMIT is not kept at all (at most MEMO_LIMIT x MEMO_KEY_LIMIT per memo)."""
    if size > MEMO_KEY_LIMIT:
        return value
    if len(memo) >= MEMO_LIMIT:
        memo.clear()
    memo[key] = value
    return value


def _service_account(user: str) -> str:
    """``system:serviceaccount:ns:name`` -> ``ns/name``; other users -> empty string."""
    prefix = "system:serviceaccount:"
    return user[len(prefix):].replace(":", "/", 1) if user.startswith(prefix) else ""


@dataclass(frozen=True, slots=True)
class Bundle:
    root: str
    priority_classes: dict[str, PriorityClass]
    queues: dict[str, Queue]
    default_queue: str
    namespaces: tuple[NamespaceRule, ...]
    excluded_namespaces: tuple[str, ...]
    admins: Principals
    controllers: Principals
    policies: tuple[Policy, ...]
    fingerprint: str = ""
    scavengers: Scavengers = field(default_factory=Scavengers)
    fair_share: FairShare = field(default_factory=FairShare)
    # spec.kubeSchedulerProfiles: the schedulerNames kube-scheduler serves (its profiles). A pending
    # pod naming another is not kube-scheduler's to bind: the queue's placement holds no room for it.
    kube_scheduler_profiles: tuple[str, ...] = (DEFAULT_SCHEDULER,)
    # Grants by namespace label (queues[].access namespaceSelector): every distinct selector, the
    # label keys they read (the reconciler publishes those, and only those; nsfacts), and the
    # published labels in force (the server swaps in a new view when they change or go stale).
    selectors: tuple[NamespaceSelector, ...] = ()
    selector_keys: tuple[str, ...] = field(init=False, default=())  # what the reconciler publishes
    # Other namespace label keys a policy's settings select namespaces by, with the policy (job-network's
    # isolation proxy): as admin-only as the grants' keys (namespace-opt-out), or a tenant who may label
    # their namespace would make their pods the proxy that reaches into every isolated namespace.
    policy_label_keys: tuple[tuple[str, str], ...] = ()
    namespace_facts: NamespaceView = field(default=NO_FACTS, compare=False)
    # sealing.unsealed: trust: what controllers make from a pod template with no seal at all is
    # trusted as before seals existed (a migration setting; a seal that does not verify never is).
    unsealed_trusted: bool = False
    mutating: tuple[Policy, ...] = field(default=(), compare=False)
    validating: tuple[Policy, ...] = field(default=(), compare=False)
    _by_request: dict[tuple[bool, str, str, str, str], tuple[Policy, ...]] = field(
        default_factory=dict, init=False, compare=False, repr=False)
    _by_namespace: dict[str, NamespaceRule | None] = field(
        default_factory=dict, init=False, compare=False, repr=False)
    _excluded: dict[str, bool] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "selector_keys", selector_keys(self.selectors))

    def candidates(self, *, mutating: bool, operation: str, group: str, version: str, kind: str) -> tuple[Policy, ...]:
        """The policies whose match takes this operation on this kind, in order (memoized:
        the answer depends only on the bundle, and there are few distinct keys)."""
        key = (mutating, operation, group, version, kind)
        found = self._by_request.get(key)
        if found is None:
            found = _remember(self._by_request, key, len(operation) + len(group) + len(version) + len(kind), tuple(
                p for p in (self.mutating if mutating else self.validating)
                if operation in p.match.operations and p.match.matches_kind(group, version, kind)
                # a type that validates on more operations than it mutates (job-network) mutates on its own
                and (not mutating or operation in p.rule.mutate_operations)
                and (not mutating or operation != "UPDATE" or p.rule.mutate_update_kinds is None
                     or kind in p.rule.mutate_update_kinds)
            ))
        return found

    def excluded(self, namespace: str) -> bool:
        """Memoized per namespace, as namespace_rule (the glob match: ~2k instructions a review)."""
        try:
            return self._excluded[namespace]
        except KeyError:
            return _remember(self._excluded, namespace, len(namespace), matches(self.excluded_namespaces, namespace))


    def namespace_rule(self, namespace: str) -> NamespaceRule | None:
        """The first rule whose globs match ``namespace`` (memoized per namespace)."""
        try:
            return self._by_namespace[namespace]
        except KeyError:
            return _remember(self._by_namespace, namespace, len(namespace),
                             next((r for r in self.namespaces if r.matches(namespace)), None))

    def default_queue_for(self, namespace: str) -> str:
        rule = self.namespace_rule(namespace)
        return rule.default_queue if rule and rule.default_queue else self.default_queue

    def queue_for(self, group: str, kind: str, requested: Any, namespace: str) -> tuple[str, bool]:
        """The queue an object runs in, and whether it was asked for: a ScavengerJob runs in
        the scavenger queue; anything else in the queue its label names (``requested``), else
        in the namespace's or the bundle's default."""
        if group == GROUP and kind == "ScavengerJob":
            return self.scavengers.queue, True
        if isinstance(requested, str):
            return requested, True
        return self.default_queue_for(namespace), requested is not None

    def made_by_controller(self, owners: Any, username: str, groups: tuple[str, ...]) -> bool:
        """A Pod with a controlling owner, created by one of the bundle's controllers: made
        from a template that was admitted as the workload."""
        controlled = isinstance(owners, list) and any(isinstance(o, dict) and o.get("controller") for o in owners)
        return controlled and self.controllers.contains(username, groups)


# -- loading ----------------------------------------------------------------
def load_bundle(directory: str | os.PathLike[str], types: Mapping[str, RuleType[Any]], *,
                deployable: bool = True) -> Bundle:
    """Load and validate a bundle directory whose policies are of ``types`` (by name);
    raises BundleError naming file:line: field. ``deployable=False`` skips the checks that
    need the whole policy set (a suite case's variant bundle.yaml runs with the suite's
    policies only)."""
    root = Path(directory)
    if not root.is_dir():
        raise BundleError(str(root), None, "", "not a directory")
    main = root / "bundle.yaml"
    if not main.is_file():
        raise BundleError(str(main), None, "", "missing: a bundle needs bundle.yaml at its top")
    digest = hashlib.sha256()
    spec = _document(main, "Bundle", digest)
    with _unexpected(spec):
        bundle = _parse_bundle(spec, str(root))
    policies: list[Policy] = []
    names: dict[str, str] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        file = folder / "policy.yaml"
        if not file.is_file():
            continue
        node = _document(file, "Policy", digest, with_metadata=True)
        with _unexpected(node):
            policy = _parse_policy(node, bundle, str(folder), types)
        if policy.name in names:
            node.req("metadata").req("name").fail(f"duplicate policy name; also in {names[policy.name]}")
        names[policy.name] = str(file)
        policies.append(policy)
    policies.sort(key=lambda p: (p.rule.order, p.name))
    if deployable:
        _check_label_grants_guarded(spec, policies)
    return Bundle(
        **{f: getattr(bundle, f) for f in ("root", "priority_classes", "queues", "default_queue",
                                           "namespaces", "excluded_namespaces", "admins", "controllers",
                                           "scavengers", "unsealed_trusted", "fair_share",
                                           "kube_scheduler_profiles")},
        policies=tuple(policies),
        fingerprint=digest.hexdigest()[:12],
        selectors=tuple(dict.fromkeys(
            g.selector for q in bundle.queues.values() for a in (q.access, q.exclusive_access) if a is not None
            for g in a.grants if g.selector is not None)),
        policy_label_keys=tuple(dict.fromkeys(
            (key, p.name) for p in policies if (keys_of := p.rule.namespace_label_keys) is not None
            for key in keys_of(p.settings))),
        mutating=tuple(p for p in policies if p.rule.mutate is not None),
        validating=tuple(p for p in policies if p.rule.validate is not None),
    )


def _check_label_grants_guarded(doc: Node, policies: list[Policy]) -> None:
    """A queue granted by namespace label is only as closed as the label: whoever may label
    their namespace would grant themselves the queue. The namespace-opt-out policy keeps every
    label a grant reads an admin's to set, on Namespace CREATE and UPDATE; a bundle that grants
    by label without it is refused at the first selector."""
    first = _first_field(doc.req("spec").req("queues"), "namespaceSelector")
    if first is None:
        return
    guards = [p for p in policies if p.rule.name == "namespace-opt-out"
              and {"CREATE", "UPDATE"} <= set(p.match.operations) and p.match.matches_kind("", "v1", "Namespace")]
    if not guards:
        first.fail("a grant by namespace label needs the namespace-opt-out policy in the bundle, matching "
                   "Namespace CREATE and UPDATE: it keeps the labels grants read an admin's to set; "
                   "without it anyone who may label their namespace grants themselves the queue")


def _first_field(node: Node, key: str) -> Node | None:
    """The first field named ``key`` anywhere under ``node`` (in file order)."""
    if isinstance(node.value, dict):
        for k, child in node.items():
            found = child if k == key else _first_field(child, key)
            if found is not None:
                return found
    elif isinstance(node.value, list):
        for child in node.seq():
            if (found := _first_field(child, key)) is not None:
                return found
    return None


@contextlib.contextmanager
def _unexpected(doc: Node) -> Iterator[None]:
    """A mistake no check anticipated still names the file (and the document's line):
    a bundle that does not load must never crash-loop the server or the reconciler."""
    try:
        yield
    except BundleError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError, RecursionError) as e:
        raise BundleError(doc.file, doc.line, doc.path, f"cannot load: {type(e).__name__}: {e}") from e


def _document(path: Path, kind: str, digest: Any, *, with_metadata: bool = False) -> Node:
    display = str(path)
    docs = read_file(path, display=display)
    digest.update(path.read_bytes())
    if len(docs) != 1:
        raise BundleError(display, None, "", f"expected exactly one YAML document, found {len(docs)}")
    doc = docs[0].mapping(allowed=("apiVersion", "kind", "metadata", "spec"))
    if doc.req("apiVersion").value != API_VERSION:
        doc.req("apiVersion").fail(f"expected {API_VERSION}")
    if doc.req("kind").value != kind:
        doc.req("kind").fail(f"expected {kind}")
    if with_metadata:
        doc.req("metadata")
    return doc


def _parse_bundle(doc: Node, root: str) -> Bundle:
    spec = doc.req("spec").mapping(allowed=(
        "defaultQueue", "priorityClasses", "queues", "namespaces", "exclude", "admins", "controllers",
        "scavengers", "sealing", "fairShare", "kubeSchedulerProfiles",
    ))
    classes: dict[str, PriorityClass] = {}
    for node in spec.req("priorityClasses").seq():
        node.mapping(allowed=("name", "value", "preemptionPolicy", "description", "adminOnly", "globalDefault"))
        name = node.req("name").str(pattern=NAME, hint="a lowercase DNS name")
        if name in classes:
            node.req("name").fail("duplicate priority class")
        pp = node.get("preemptionPolicy")
        classes[name] = PriorityClass(
            name=name,
            value=node.req("value").int(minimum=-(10**9), maximum=10**9),
            preemption_policy=pp.enum("PreemptLowerPriority", "Never") if pp else "PreemptLowerPriority",
            description=node.req("description").str(),
            admin_only=node.opt("adminOnly", Node.bool, False),
            global_default=node.opt("globalDefault", Node.bool, False),
        )
    if sum(pc.global_default for pc in classes.values()) > 1:
        spec.req("priorityClasses").fail("at most one priority class may be globalDefault")

    queues: dict[str, Queue] = {}
    for node in spec.req("queues").seq():
        node.mapping(allowed=("name", "priorityClass", "scavenger", "timeLimit", "nodeSelector", "access",
                              "exclusiveAccess", "gang", "gated", "state", "stateReason", "backfill",
                              "promise"))
        name = node.req("name").str(pattern=NAME, hint="a lowercase DNS name")
        if name in queues:
            node.req("name").fail("duplicate queue")
        pc_node = node.req("priorityClass")
        pc = pc_node.str()
        if pc not in classes:
            pc_node.fail(f"unknown priority class; declared: {', '.join(sorted(classes))}")
        default = maximum = None
        if (tl := node.get("timeLimit")) is not None:
            tl.mapping(allowed=("default", "max"))
            if (d := tl.get("default")) is not None:
                default = d.parsed(parse_duration, expected="a duration like 90m, 4h or 2d")
            if (m := tl.get("max")) is not None:
                maximum = m.parsed(parse_duration, expected="a duration like 90m, 4h or 2d")
            if default and maximum and default > maximum:
                tl.req("default").fail("the default time limit exceeds the maximum")
        sel = node.get("nodeSelector")
        scavenger = node.opt("scavenger", Node.bool, False)
        queues[name] = Queue(
            name=name,
            priority_class=pc,
            scavenger=scavenger,
            default_time_limit=default,
            max_time_limit=maximum,
            node_selector=_label_map(sel) if sel else {},
            access=parse_access(node, "access"),
            exclusive_access=parse_access(node, "exclusiveAccess"),
            gangs=(g.enum("auto", "always") == "always") if (g := node.get("gang")) is not None else False,
            # scavenger queues default to ungated: ScavengerJobs already wait in the reconciler, and
            # scavenger pods never preempt, so kube-scheduler's queue is their backfill
            gated=node.opt("gated", Node.bool, not scavenger),
            state=st.enum(*QUEUE_STATES) if (st := node.get("state")) is not None else "open",
            state_reason=node.opt("stateReason", lambda n: n.str(), ""),
            backfill=bf.enum(*BACKFILLS) if (bf := node.get("backfill")) is not None else "conservative",
            promise=pr.enum(*PROMISES) if (pr := node.get("promise")) is not None else "deadline",
        )
        if queues[name].backfill == "start-by" and queues[name].promise != "deadline":
            node.req("backfill").fail("backfill: start-by holds start-bys as deadlines: it needs promise: deadline "
                                      "(the default), not promise: fair-share")
    if not queues:
        spec.req("queues").fail("declare at least one queue")

    ordinary = [q for q in queues.values() if not q.scavenger]
    scavengers = [q for q in queues.values() if q.scavenger]
    for q in scavengers:
        scav = classes[q.priority_class]
        where = _queue_node(spec, q.name)
        if scav.preemption_policy != "Never":
            where.req("priorityClass").fail(
                f"scavenger queue {q.name!r} uses class {scav.name!r}, whose preemptionPolicy must be Never"
            )
        for o in ordinary:
            if classes[o.priority_class].value <= scav.value:
                where.req("priorityClass").fail(
                    f"scavenger class {scav.name!r} ({scav.value}) must rank below ordinary class "
                    f"{o.priority_class!r} ({classes[o.priority_class].value}) of queue {o.name!r}"
                )

    dq = spec.get("defaultQueue")
    default_queue = dq.str() if dq else "batch"
    if default_queue not in queues:
        (dq or spec).fail(f"default queue {default_queue!r} is not declared; queues: {', '.join(queues)}")

    namespaces: list[NamespaceRule] = []
    for node in spec.each("namespaces"):
        node.mapping(allowed=("names", "defaultQueue", "allowedQueues", "nodeSelector"))
        rule_dq = node.get("defaultQueue")
        aq = node.get("allowedQueues")
        for n in ([rule_dq] if rule_dq else []) + (aq.seq() if aq else []):
            if n.str() not in queues:
                n.fail(f"unknown queue; queues: {', '.join(queues)}")
        sel = node.get("nodeSelector")
        namespaces.append(NamespaceRule(
            names=node.req("names").str_list(),
            default_queue=rule_dq.value if rule_dq else None,
            allowed_queues=aq.str_list() if aq else None,
            node_selector=_label_map(sel) if sel else {},
        ))

    _check_node_selectors(spec, namespaces, queues)
    _check_default_queues(spec, dq, namespaces, queues, default_queue)

    excluded: tuple[str, ...] = DEFAULT_EXCLUDED_NAMESPACES
    if (ex := spec.get("exclude")) is not None:
        ex.mapping(allowed=("namespaces",))
        excluded = ex.req("namespaces").str_list()
        for n in ex.req("namespaces").seq():
            if matches((n.value,), PROBE_NAME):
                n.fail("excludes every namespace (it matches any name a user may create); "
                       "name the namespaces to leave alone")
    for role in ("admins", "controllers"):
        _refuse_everyone(spec.get(role), role)

    # The one answer to "which queue do ScavengerJobs run in": the webhook judges a ScavengerJob for
    # it (Bundle.queue_for) and the reconciler makes its Jobs in it.
    dflt = Scavengers(queue=_default_scavenger_queue(queues))
    sv_settings = dflt
    if (sv := spec.get("scavengers")) is not None:
        sv.mapping(allowed=("queue", "maxShare", "unschedulableTimeout", "gracePeriod", "guardCoreMinutes"))
        sq = sv.get("queue")
        if sq is not None and (sq.str() not in queues or not queues[sq.str()].scavenger):
            sq.fail(f"must be a scavenger queue (scavenger: true); those: "
                    f"{', '.join(q.name for q in queues.values() if q.scavenger) or 'none'}")
        ms, ut, gp = sv.get("maxShare"), sv.get("unschedulableTimeout"), sv.get("gracePeriod")
        sv_settings = Scavengers(
            queue=sq.str() if sq is not None else dflt.queue,
            max_share=ms.parsed(parse_share, expected="a share of the cluster like 70% (or 0.7), over 0 and at most 100%")
            if ms is not None else dflt.max_share,
            unschedulable_timeout=ut.parsed(parse_duration, expected="a duration like 5m")
            if ut is not None else dflt.unschedulable_timeout,
            grace_period=gp.parsed(parse_duration, expected="a duration like 60s or 2m")
            if gp is not None else dflt.grace_period,
            guard=gd.parsed(parse_core_minutes, expected="core-minutes of unsaved work, a number >= 0 (0: no guard)")
            if (gd := sv.get("guardCoreMinutes")) is not None else dflt.guard,
        )

    fair_share = _parse_fair_share(spec.get("fairShare"))

    profiles: tuple[str, ...] = (DEFAULT_SCHEDULER,)
    if (kp := spec.get("kubeSchedulerProfiles")) is not None:
        names = [n.str(pattern=DNS_SUBDOMAIN, hint="a scheduler name (a lowercase DNS subdomain)") for n in kp.seq()]
        if not names:
            kp.fail(f"name at least one profile (the default: [{DEFAULT_SCHEDULER}])")
        for i, n in enumerate(kp.seq()):
            if names.index(n.value) != i:
                n.fail("duplicate profile")
        profiles = tuple(names)

    unsealed_trusted = False
    if (sealing := spec.get("sealing")) is not None:
        sealing.mapping(allowed=("unsealed",))
        unsealed_trusted = sealing.opt("unsealed", lambda n: n.enum("judge", "trust"), "judge") == "trust"

    return Bundle(
        root=root,
        scavengers=sv_settings,
        unsealed_trusted=unsealed_trusted,
        priority_classes=classes,
        queues=queues,
        default_queue=default_queue,
        namespaces=tuple(namespaces),
        excluded_namespaces=excluded,
        admins=parse_principals(spec.get("admins")) or Principals(groups=("system:masters",)),
        controllers=parse_principals(spec.get("controllers")) or Principals(
            users=("system:kube-controller-manager",), service_accounts=TEMPLATE_CONTROLLERS),
        policies=(),
        fair_share=fair_share,
        kube_scheduler_profiles=profiles,
    )


def _parse_fair_share(node: Node | None) -> FairShare:
    if node is None:
        return FairShare()
    node.mapping(allowed=("halfLife", "interval", "weights", "accounts", "ageWeight", "maxAge"))
    dflt = FairShare()
    duration = "a duration like 7d, 12h or 1m"

    def seconds(key: str, default: int, minimum: int) -> int:
        n = node.get(key)
        if n is None:
            return default
        value = n.parsed(parse_duration, expected=duration)
        if value < minimum:
            n.fail(f"at least {minimum} s")
        return value

    def number(n: Node, maximum: float) -> float:
        v = n.value
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= maximum:
            n.fail(f"a number from 0 to {maximum:g}")
        return float(v)

    weights = dflt.weights
    if (w := node.get("weights")) is not None:
        weights = tuple((k, number(v, 1e6)) for k, v in w.items())
    accounts: list[Account] = []
    for a in node.each("accounts"):
        a.mapping(allowed=("name", "namespaces", "shares"))
        name = a.req("name").str(pattern=NAME, hint="a lowercase DNS name")
        if any(x.name == name for x in accounts):
            a.req("name").fail("duplicate account")
        shares = number(a.req("shares"), 1e6) if a.get("shares") is not None else 1.0
        if shares <= 0:
            a.req("shares").fail("more than 0 (an account with no share would never run)")
        accounts.append(Account(name, a.req("namespaces").str_list(), shares))
    return FairShare(
        half_life=seconds("halfLife", dflt.half_life, 60),
        interval=seconds("interval", dflt.interval, 5),
        weights=weights,
        accounts=tuple(accounts),
        age_weight=number(aw, 100.0) if (aw := node.get("ageWeight")) is not None else dflt.age_weight,
        max_age=seconds("maxAge", dflt.max_age, 60),
    )


# The kube-controller-manager controllers that create objects from a workload's template (Pods;
# a Deployment's ReplicaSets; a CronJob's Jobs), as they authenticate with
# --use-service-account-credentials (kubeadm and most distributions); without it they are all
# system:kube-controller-manager. Not "kube-system/*": any other ServiceAccount there (add-ons,
# CNI, whatever a user can get a token for) would skip the user-only checks.
TEMPLATE_CONTROLLERS = tuple(f"kube-system/{c}" for c in (
    "job-controller", "replicaset-controller", "statefulset-controller", "daemon-set-controller",
    "deployment-controller", "cronjob-controller"))


# Who "everyone" is, for refusing a bundle that grants admin or controller trust to all:
# the groups every caller of a kind is in, and names no admin would list on purpose.
EVERYONE_GROUPS = {
    "system:authenticated": "every authenticated user",
    "system:unauthenticated": "every anonymous caller",
    "system:serviceaccounts": "every service account",
    "system:serviceaccounts:batchgate-probe-7f3a": "the service accounts of any namespace",
}
PROBE_NAME = "batchgate-probe-7f3a"  # an arbitrary name: a pattern matching it matches anything
EVERYONE_USERS = {
    "system:anonymous": "anonymous callers",
    f"system:serviceaccount:{PROBE_NAME}:default": "service accounts of any namespace",
    PROBE_NAME: "any user",
}


def _refuse_everyone(node: Node | None, role: str) -> None:
    """Refuse admins/controllers that would take in everyone (``system:authenticated``,
    ``system:serviceaccounts``, ``*``, ``*/default``, ...): user-only checks would then
    stop no one. Checked per entry, so the error points at the line to fix."""
    if node is None:
        return
    node.mapping()
    what = "admin rights" if role == "admins" else "controller trust (pods skip user-only checks)"
    for key, table in (("groups", EVERYONE_GROUPS), ("users", EVERYONE_USERS)):
        for entry in node.each(key):
            for probe, who in table.items():
                if isinstance(entry.value, str) and matches((entry.value,), probe):
                    entry.fail(f"grants {what} to {who} ({probe}); list only principals you trust")
    for entry in node.each("serviceAccounts"):
        ns, _, name = str(entry.value).partition("/")
        if not name:
            entry.fail("expected namespace/name (a glob in the name only, e.g. kube-system/*)")
        if any(c in ns for c in "*?["):
            entry.fail(f"grants {what} to service accounts of any matching namespace, which users may "
                       "create; name the namespace exactly")


def _check_node_selectors(spec: Node, namespaces: list[NamespaceRule], queues: dict[str, Queue]) -> None:
    """A namespace and a queue usable there must not ask for different values of one node label:
    such pods could never be scheduled. Said at load time, at the line to fix."""
    for i, rule in enumerate(namespaces):
        for queue in queues.values():
            if rule.allowed_queues is not None and queue.name not in rule.allowed_queues:
                continue
            for key, value in rule.node_selector.items():
                other = queue.node_selector.get(key)
                if other is not None and other != value:
                    spec.req("namespaces").seq()[i].req("nodeSelector").req(key).fail(
                        f"namespaces matching {', '.join(rule.names)} require node label {key}={value}, "
                        f"but queue {queue.name!r} (allowed there) requires {key}={other}; its pods "
                        "could never be scheduled"
                    )


def _check_default_queues(spec: Node, dq: Node | None, namespaces: list[NamespaceRule],
                          queues: dict[str, Queue], default_queue: str) -> None:
    """A default queue that is closed to the namespaces it is the default of would deny every
    workload there that names no queue: refused at load, at the line to fix. Namespaces named
    exactly are checked; a glob matches names the loader cannot list."""
    for i, rule in enumerate(namespaces):
        name = rule.default_queue or default_queue
        access = queues[name].access
        if access is None:
            continue
        for ns in rule.names:
            if any(c in ns for c in "*?[") or any(not g.namespaces or matches(g.namespaces, ns)
                                                   for g in access.grants):
                continue
            where = spec.req("namespaces").seq()[i]
            (where.get("defaultQueue") or where.req("names")).fail(
                f"namespace {ns} defaults to queue {name!r}, which is open to {access.describe()}; "
                "open the queue to the namespace or give it another defaultQueue")
    closed = queues[default_queue].access
    if closed is not None and not closed.grants:
        (dq or spec).fail(f"the default queue {default_queue!r} is open to the bundle's admins only "
                          "(access: none): every workload that names no queue would be denied")


def _queue_node(spec: Node, name: str) -> Node:
    return next(n for n in spec.req("queues").seq() if n.get("name") and n.req("name").value == name)


ACCESS_FIELDS = ("namespaces", "users", "groups", "serviceAccounts")
NAMESPACE_GLOB = r"[a-z0-9*?\[\]-]+"


def parse_access(queue: Node, key: str) -> Access | None:
    """A queue's ``access`` or ``exclusiveAccess``: absent (None: no restriction), the string
    ``none`` (the bundle's admins only), one grant, or a list of grants (any one admits)."""
    if key not in queue.value:
        return None
    if queue.value[key] is None:
        dict(queue.items())[key].fail(
            "names nobody; leave the field out to open the queue to everyone, or write `none` to "
            "keep it to the bundle's admins")
    node = queue.req(key)
    if node.value == "none":
        return Access(())
    if isinstance(node.value, str):
        node.fail("expected `none`, a grant {namespaces, users, groups, serviceAccounts} or a list of grants")
    items = node.seq() if isinstance(node.value, list) else [node]
    if not items:
        node.fail("names nobody; leave the field out to open the queue to everyone, or write `none` "
                  "to keep it to the bundle's admins")
    return Access(tuple(_parse_grant(g) for g in items))


def _parse_grant(node: Node) -> Grant:
    node.mapping(allowed=(*ACCESS_FIELDS, "namespaceSelector"))
    for key in ACCESS_FIELDS:
        if key in node.value and not node.value[key]:
            dict(node.items())[key].fail("empty: list at least one entry, or leave the field out")
    if not node.value:
        node.fail(f"names nobody; give at least one of {', '.join(ACCESS_FIELDS)}")
    for n in node.each("namespaces"):
        n.str(pattern=NAMESPACE_GLOB, hint="a namespace name or glob (lowercase letters, digits, '-', '*', '?')")
    for n in node.each("users"):
        user = n.str()
        if user.startswith("system:serviceaccount:"):
            n.fail("a service account: list it under serviceAccounts as namespace/name")
        if user != user.strip():
            n.fail("leading or trailing spaces")
    for n in node.each("groups"):
        if n.str() != n.value.strip():
            n.fail("leading or trailing spaces")
    for n in node.each("serviceAccounts"):
        ns, _, name = n.str().partition("/")
        if not ns or not name or "/" in name:
            n.fail("expected namespace/name (globs allowed, e.g. ci/* or team-*/runner)")
    return Grant(
        namespaces=node.opt("namespaces", Node.str_list, ()),
        users=node.opt("users", Node.str_list, ()),
        groups=node.opt("groups", Node.str_list, ()),
        service_accounts=node.opt("serviceAccounts", Node.str_list, ()),
        selector=(parse_namespace_selector(dict(node.items())["namespaceSelector"])
                  if "namespaceSelector" in node.value else None),
    )


SELECTOR_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"


def parse_namespace_selector(node: Node) -> NamespaceSelector:
    """A standard LabelSelector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist) over
    a namespace's labels; what the API server would refuse in a LabelSelector is refused here."""
    if node.value is None or node.value == {}:
        node.fail("empty: a selector that selects every namespace; leave namespaceSelector out instead")
    node.mapping(allowed=("matchLabels", "matchExpressions"))

    def key(n: Node, k: object) -> str:
        if not isinstance(k, str) or len(k.rpartition("/")[2]) > 63 or not re.fullmatch(LABEL_KEY, k):
            n.fail(f"{k!r} is not a valid label key")
        return k

    def value(n: Node) -> str:
        v = n.value
        if isinstance(v, bool | int | float):
            n.fail("expected a string (quote it in YAML)")
        if not isinstance(v, str) or len(v) > 63 or not re.fullmatch(SELECTOR_VALUE, v):
            n.fail("not a valid label value (63 characters at most: letters, digits, '-', '_', '.')")
        return v

    labels: list[tuple[str, str]] = []
    if (ml := node.get("matchLabels")) is not None:
        if not isinstance(ml.value, dict) or not ml.value:
            ml.fail("expected a map of label: value")
        labels = [(key(n, k), value(n)) for k, n in ml.items()]
    exprs: list[tuple[str, str, tuple[str, ...]]] = []
    if (me := node.get("matchExpressions")) is not None and not me.seq():
        me.fail("empty: list at least one expression, or leave the field out")
    for e in node.each("matchExpressions"):
        e.mapping(allowed=("key", "operator", "values"))
        op = e.req("operator").enum(*OPERATORS)
        values = tuple(sorted({value(v) for v in e.each("values")}))
        if op in ("In", "NotIn") and not values:
            e.fail(f"operator {op} needs values")
        if op in ("Exists", "DoesNotExist") and e.get("values") is not None and e.req("values").value:
            e.req("values").fail(f"operator {op} takes no values")
        exprs.append((key(e.req("key"), e.req("key").value), op, values))
    if not labels and not exprs:
        node.fail("empty: give matchLabels or matchExpressions")
    return NamespaceSelector(tuple(sorted(labels)), tuple(exprs))


def parse_principals(node: Node | None) -> Principals | None:
    """``{users, groups, serviceAccounts}`` (globs) as in ``admins``; None for an absent node."""
    if node is None:
        return None
    node.mapping(allowed=("users", "groups", "serviceAccounts"))
    return Principals(
        users=node.opt("users", Node.str_list, ()),
        groups=node.opt("groups", Node.str_list, ()),
        service_accounts=node.opt("serviceAccounts", Node.str_list, ()),
    )


def _label_map(node: Node) -> dict[str, str]:
    out = node.str_map()
    for key, sub in node.items():
        if not re.fullmatch(LABEL_KEY, key):
            sub.fail("not a valid label key")
    return out


def _parse_policy(doc: Node, bundle: Bundle, folder: str, types: Mapping[str, RuleType[Any]]) -> Policy:
    meta = doc.req("metadata").mapping(allowed=("name", "version", "description"))
    spec = doc.req("spec").mapping(allowed=("type", "match", "exclude", "failurePolicy", "settings"))
    type_node = spec.req("type")
    rule = types.get(type_node.str())
    if rule is None:
        type_node.fail(f"unknown policy type; known: {', '.join(sorted(types))}")
    fp = spec.get("failurePolicy")
    settings_node = spec.get("settings") or Node({}, doc.file, spec.line, _sub(spec.path, "settings"), {})
    m, ex = spec.get("match"), spec.get("exclude")
    match = _parse_match(m, rule) if m else Match(
        kinds=rule.default_kinds, operations=rule.default_operations
    )
    return Policy(
        name=meta.req("name").str(pattern=NAME, hint="a lowercase DNS name"),
        version=meta.opt("version", lambda n: n.int(minimum=1), 1),
        description=meta.opt("description", Node.str, ""),
        rule=rule,
        settings=rule.parse(settings_node, bundle),
        match=match,
        exclude=_parse_match(ex, rule, exclude=True) if ex else None,
        failure_policy=fp.enum("Ignore", "Fail") if fp else rule.default_failure_policy,
        path=folder,
    )


def _sub(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _parse_match(node: Node, rule: RuleType[Any], *, exclude: bool = False) -> Match:
    node.mapping(allowed=("kinds", "operations", "namespaces", "selector", "users", "groups", "serviceAccounts"))
    kinds = rule.default_kinds
    if (k := node.get("kinds")) is not None:
        kinds = tuple(_parse_kind(n) for n in k.seq())
    operations: tuple[str, ...] = () if exclude else rule.default_operations
    if (o := node.get("operations")) is not None:
        operations = tuple(n.enum(*OPERATIONS) for n in o.seq())
        if rule.mutate is not None and not exclude:
            for n in o.seq():
                if n.value not in rule.mutate_operations and n.value not in rule.default_operations:
                    n.fail(
                        f"policy type {rule.name!r} mutates and may only run on "
                        f"{', '.join(rule.mutate_operations)} (other operations would touch immutable fields)"
                    )
    selector = None
    if (s := node.get("selector")) is not None:
        s.mapping(allowed=("matchLabels", "matchExpressions"))
        exprs = []
        for e in s.each("matchExpressions"):
            e.mapping(allowed=("key", "operator", "values"))
            op = e.req("operator").enum("In", "NotIn", "Exists", "DoesNotExist")
            values: frozenset[str] = frozenset(e.opt("values", Node.str_list, ()))
            if op in ("In", "NotIn") and not values:
                e.fail(f"operator {op} needs values")
            exprs.append((e.req("key").str(), op, values))
        ml = s.get("matchLabels")
        selector = LabelSelector(ml.str_map() if ml else {}, tuple(exprs))

    def strs(key: str) -> tuple[str, ...]:
        return node.opt(key, Node.str_list, ())

    return Match(
        kinds=kinds,
        operations=operations,
        namespaces=strs("namespaces"),
        selector=selector,
        users=strs("users"),
        groups=strs("groups"),
        service_accounts=strs("serviceAccounts"),
    )


def _parse_kind(node: Node) -> tuple[str, str, str]:
    """``Pod`` (core/v1), ``batch/v1/Job``, ``*/*/*``, or ``v1/Pod``."""
    parts = node.str().split("/")
    if len(parts) == 1:
        return ("", "v1", parts[0]) if parts[0] != "*" else ("*", "*", "*")
    if len(parts) == 2:
        return ("", parts[0], parts[1])
    if len(parts) == 3:
        return (parts[0], parts[1], parts[2])
    node.fail("expected Kind, version/Kind or group/version/Kind (e.g. batch/v1/Job)")
