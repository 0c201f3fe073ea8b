"""Namespace labels for queue grants by ``namespaceSelector``: the reconciler publishes them, the
webhook reads them from a mounted ConfigMap, and neither side needs the other's credentials.

An AdmissionReview carries the object and the requester, never the labels of the namespace, and
the webhook holds no API credentials (it mounts no token). So the reconciler, which watches
Namespaces anyway, publishes a document of facts into the ConfigMap ``batchgate-namespaces`` (key
``namespaces.json``) in batchgate's own namespace; the webhook mounts it like the bundle::

    {"apiVersion": "batchgate.io/v1alpha1", "kind": "NamespaceLabels",
     "publishedAt": "2026-11-23T15:30:00Z",   # refreshed every REFRESH seconds at least
     "bundle": "3f2a9c0d1e4b",                # the bundle whose selectors chose the keys
     "keys": ["team"],                        # the label keys covered, and only those
     "namespaces": {"demo": {"team": "a"}, "gpu-lab": {}}}   # every namespace, its covered labels

Only the label keys that the bundle's selectors reference are published (a namespace's other
labels are nobody's business here and would only make the document larger). A namespace the
document does not list, a selector whose keys it does not cover, and a document older than the
webhook's maximum age never match a selector: selector grants fail closed, names and globs keep
working. Everything here is pure: no files, no clock, no API.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from . import selectors
from .contract import API_VERSION
from .units import format_time, parse_time

KIND = "NamespaceLabels"
CONFIGMAP = "batchgate-namespaces"  # in batchgate's own namespace (the reconciler's lease namespace)
KEY = "namespaces.json"
# A ConfigMap holds at most 1 MiB (data and metadata together); the document stays well inside.
MAX_BYTES = 900 * 1024
REFRESH = 300.0  # the reconciler rewrites publishedAt at least this often, changed or not
MAX_AGE = 900.0  # the webhook's default: older facts are stale (three refreshes missed)
OPERATORS = selectors.OPERATORS
LABEL_KEY = r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
LABEL_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
NAMESPACE_NAME = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
EMPTY: frozenset[str] = frozenset()


class FactsError(ValueError):
    """A facts document that cannot be used; the message names the field."""


# -- selectors ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NamespaceSelector:
    """A standard LabelSelector over a namespace's labels (hashable: the webhook keeps one set
    of matching namespaces per selector)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # key, operator, values

    def label_keys(self) -> frozenset[str]:
        return frozenset([k for k, _ in self.match_labels] + [k for k, _, _ in self.match_expressions])

    def matches(self, labels: Mapping[str, str]) -> bool:
        return selectors.matches(self.match_labels, self.match_expressions, labels)

    def describe(self) -> str:
        """As kubectl writes a selector: ``team=a,tier in (gold,silver),!legacy``."""
        return selectors.text(self.match_labels, self.match_expressions, "(everything)")


def selector_keys(selectors: Iterable[NamespaceSelector]) -> tuple[str, ...]:
    return tuple(sorted({k for s in selectors for k in s.label_keys()}))


# -- the document -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Facts:
    published_at: float  # epoch seconds, the publisher's clock
    bundle: str
    keys: frozenset[str]
    labels: Mapping[str, Mapping[str, str]]  # namespace -> its labels among ``keys``


def document(namespaces: Mapping[str, Mapping[str, Any]], keys: Iterable[str], now: float,
             bundle: str) -> dict[str, Any]:
    """What the reconciler publishes: every namespace, with its labels among ``keys`` only."""
    wanted = sorted(set(keys))
    return {
        "apiVersion": API_VERSION, "kind": KIND, "publishedAt": format_time(now), "bundle": bundle, "keys": wanted,
        "namespaces": {name: {k: str(labels[k]) for k in wanted if k in labels}
                       for name, labels in sorted(namespaces.items())},
    }


def render(doc: Mapping[str, Any]) -> str:
    """Deterministic and compact: equal facts make equal text."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def same_facts(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Equal but for when they were published."""
    if old is None:
        return False
    return {k: v for k, v in old.items() if k != "publishedAt"} == {k: v for k, v in new.items() if k != "publishedAt"}


def needs_write(old: Mapping[str, Any] | None, new: Mapping[str, Any], now: float,
                refresh: float = REFRESH) -> bool:
    """Publish when the facts changed, or when the published ones are due for a refresh (so the
    webhook can tell a live publisher from a dead one). A publishedAt in the future (a clock that
    went back) is rewritten too."""
    if not same_facts(old, new):
        return True
    assert old is not None
    try:
        at = published_at(old)
    except FactsError:
        return True
    return not (now - refresh < at <= now + 60)


def published_at(doc: Mapping[str, Any]) -> float:
    """A document's publishedAt (epoch s), without checking the rest; FactsError if unreadable."""
    return _parse_time(doc.get("publishedAt"), "publishedAt")


def parse_facts(text: str | bytes, source: str = KEY) -> Facts:
    """Read and check a published document (the mounted file, or a file given to ``batchgate
    check``). Raises FactsError: ``source: field: what is wrong``."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise FactsError(f"{source}: not JSON: {e}") from e
    return facts_from(doc, source)


def facts_from(doc: Any, source: str = KEY) -> Facts:
    def bad(where: str, what: str) -> FactsError:
        return FactsError(f"{source}: {where}: {what}")

    if not isinstance(doc, dict):
        raise bad("(top)", f"expected an object, got {type(doc).__name__}")
    if doc.get("kind") != KIND or doc.get("apiVersion") != API_VERSION:
        raise bad("kind", f"expected apiVersion {API_VERSION}, kind {KIND}")
    try:
        published = _parse_time(doc.get("publishedAt"), "publishedAt")
    except FactsError as e:
        raise bad("publishedAt", str(e)) from e
    bundle = doc.get("bundle", "")
    if not isinstance(bundle, str):
        raise bad("bundle", "expected a string")
    keys = doc.get("keys")
    if not isinstance(keys, list) or not all(isinstance(k, str) and re.fullmatch(LABEL_KEY, k) for k in keys):
        raise bad("keys", "expected a list of label keys")
    covered = frozenset(keys)
    namespaces = doc.get("namespaces")
    if not isinstance(namespaces, dict):
        raise bad("namespaces", "expected an object of namespace -> labels")
    labels: dict[str, dict[str, str]] = {}
    for name, ls in namespaces.items():
        if not re.fullmatch(NAMESPACE_NAME, name) or len(name) > 63:
            raise bad(f"namespaces.{name}", "not a namespace name")
        if not isinstance(ls, dict):
            raise bad(f"namespaces.{name}", "expected an object of label -> value")
        for k, v in ls.items():
            if k not in covered:
                raise bad(f"namespaces.{name}.{k}", "a label key the document does not list under keys")
            if not isinstance(v, str) or len(v) > 63 or not re.fullmatch(LABEL_VALUE, v):
                raise bad(f"namespaces.{name}.{k}", "not a label value")
        labels[name] = ls
    return Facts(published_at=published, bundle=bundle, keys=covered, labels=labels)


def _parse_time(value: Any, name: str) -> float:
    if not isinstance(value, str):
        raise FactsError("expected an RFC 3339 time (e.g. 2026-11-23T15:30:00Z)")
    ts = parse_time(value)
    if ts is None:
        raise FactsError(f"not an RFC 3339 time with a time zone: {value!r}")
    if not math.isfinite(ts):
        raise FactsError(f"not a time: {value!r}")
    return ts


# -- what the webhook holds ----------------------------------------------------------------
State = Literal["fresh", "stale", "missing"]


@dataclass(frozen=True, slots=True)
class NamespaceView:
    """The facts as the webhook uses them, computed once per reload (and when they turn stale),
    never per review: for each of the bundle's selectors, the namespaces it matches."""

    state: State = "missing"
    reason: str = "the reconciler has not published namespace labels (ConfigMap batchgate-namespaces)"
    selected: Mapping[NamespaceSelector, frozenset[str]] = field(default_factory=dict)
    known: frozenset[str] = EMPTY
    uncovered: Mapping[NamespaceSelector, tuple[str, ...]] = field(default_factory=dict)
    published_at: float | None = None
    bundle: str = ""

    def selects(self, selector: NamespaceSelector, namespace: str) -> bool:
        return namespace in self.selected.get(selector, EMPTY)

    def why_not(self, selector: NamespaceSelector, namespace: str) -> str:
        """Why ``selector`` cannot be judged for ``namespace`` ('' when it can, and simply does
        not match): said in the denial, so that the user knows to retry or to ask an admin."""
        if self.state != "fresh":
            return f"namespace labels are not usable: {self.reason}; grants by label admit nobody until then"
        if selector in self.uncovered:
            return (f"the published namespace labels do not cover {', '.join(self.uncovered[selector])} yet "
                    f"(published for bundle {self.bundle or '?'}): the reconciler takes up a new bundle at its "
                    "next resync (5 minutes by default); retry then")
        if namespace not in self.known:
            return (f"labels of namespace {namespace} not yet published by the reconciler (a new namespace "
                    "takes up to a minute or two to appear); retry in a minute")
        return ""


NO_FACTS = NamespaceView()


def view(selectors: Iterable[NamespaceSelector], facts: Facts | None, now: float, max_age: float = MAX_AGE,
         problem: str = "") -> NamespaceView:
    """``facts`` as of ``now`` for ``selectors``. ``problem``: why there are no facts (the file is
    missing, or does not load), for the denials."""
    if facts is None:
        return NamespaceView(reason=problem or NO_FACTS.reason)
    age = now - facts.published_at
    if age > max_age or age < -max_age:
        when = format_time(facts.published_at)
        why = (f"they were published at {when}, {_minutes(age)} ago (more than {_minutes(max_age)}): is the "
               "reconciler running?" if age > 0 else
               f"they claim to be published at {when}, {_minutes(-age)} in the future: clocks disagree")
        return NamespaceView(state="stale", reason=why, published_at=facts.published_at, bundle=facts.bundle)
    selected: dict[NamespaceSelector, frozenset[str]] = {}
    uncovered: dict[NamespaceSelector, tuple[str, ...]] = {}
    for s in set(selectors):
        missing = tuple(sorted(s.label_keys() - facts.keys))
        if missing:
            uncovered[s] = missing
            continue
        selected[s] = frozenset(n for n, labels in facts.labels.items() if s.matches(labels))
    return NamespaceView(state="fresh", reason="", selected=selected, known=frozenset(facts.labels),
                         uncovered=uncovered, published_at=facts.published_at, bundle=facts.bundle)


def is_stale(v: NamespaceView, now: float, max_age: float = MAX_AGE) -> bool:
    """Whether a fresh view has aged past ``max_age`` by ``now`` (the webhook checks this on
    every reload tick, and recomputes the view when it flips)."""
    return v.state == "fresh" and v.published_at is not None and abs(now - v.published_at) > max_age


def _minutes(seconds: float) -> str:
    m = int(abs(seconds) // 60)
    return f"{m} min" if m < 120 else f"{m // 60} h"
