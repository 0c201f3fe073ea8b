"""Maintenance windows as plain data: parsing, node matching and the countdown.

One module knows what a ``MaintenanceWindow`` (``batchgate.io/v1alpha1``,
cluster-scoped) means, so that the validating policy, the admission rule that
keeps long jobs off a window's nodes, the reconciler and the CLI cannot drift
apart:

- :func:`parse_window` turns the object into a :class:`Window`, or into the
  list of everything wrong with it (each problem names its field path);
- :class:`Selector` is a Kubernetes label selector (``matchLabels`` and
  ``matchExpressions`` with ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``);
- the *countdown*: the reconciler labels each node that has a window ahead
  with ``batchgate.io/maintenance-in-minutes`` = whole minutes left before the
  earliest window, rounded *down* and with ``slack`` held back, so the value
  never overstates the time left until it is next rewritten
  (:func:`countdown`). Admission gives a time-limited pod a required node
  affinity that only nodes without the label, or with a value ``Gt`` the pod's
  limit in minutes (:func:`minutes_needed`), satisfy; kube-scheduler enforces
  it when it binds the pod, however long the pod waited.

No clock, no I/O: ``now`` is always an argument.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from . import selectors
from .units import format_time, parse_time, shown

KIND = "MaintenanceWindow"
SPEC_FIELDS = ("start", "end", "nodeSelector", "nodes", "reason")
OPERATORS = selectors.OPERATORS
LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
State = Literal["Scheduled", "Active", "Finished"]


@dataclass(frozen=True, slots=True)
class Selector:
    """A parsed Kubernetes label selector; the empty selector matches every node."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return selectors.matches(self.match_labels, self.match_expressions, labels)

    def __str__(self) -> str:
        return selectors.text(self.match_labels, ((k, op, sorted(v)) for k, op, v in self.match_expressions),
                              "(all nodes)")


@dataclass(frozen=True, slots=True)
class Window:
    name: str
    uid: str
    start: float  # epoch seconds
    end: float
    start_text: str  # as written, for messages
    end_text: str
    selector: Selector | None
    nodes: frozenset[str]
    reason: str

    def covers(self, node: str, labels: Mapping[str, str]) -> bool:
        """Whether the window affects this node (named, or matched by the selector)."""
        return node in self.nodes or (self.selector is not None and self.selector.matches(labels))

    def state(self, now: float) -> State:
        if now < self.start:
            return "Scheduled"
        return "Active" if now < self.end else "Finished"

    def describe(self) -> str:
        """``window rack-7-firmware (2026-11-24T06:00:00Z .. 2026-11-24T10:00:00Z: firmware update)``."""
        why = f": {self.reason}" if self.reason else ""
        return f"window {self.name} ({self.start_text} .. {self.end_text}{why})"


def parse_selector(value: Any, path: str, errors: list[str]) -> Selector | None:
    """A label selector, or None with the problems appended to ``errors``."""
    if not isinstance(value, dict):
        errors.append(f"{path}: must be a label selector (matchLabels and/or matchExpressions), got {shown(value)}")
        return None
    ok = True
    for key in value:
        if key not in ("matchLabels", "matchExpressions"):
            errors.append(f"{path}.{key}: unknown field (known: matchLabels, matchExpressions)")
            ok = False
    labels: list[tuple[str, str]] = []
    ml = value.get("matchLabels")
    if ml is not None and not isinstance(ml, dict):
        errors.append(f"{path}.matchLabels: must be a map of label keys to values")
        ok = False
    for k, v in (ml or {}).items() if isinstance(ml, dict) else ():
        if not _label_key(k):
            errors.append(f"{path}.matchLabels: {shown(k)} is not a valid label key")
            ok = False
        elif not isinstance(v, str) or not _label_value(v):
            errors.append(f"{path}.matchLabels.{k}: {shown(v)} is not a valid label value (63 characters at most, "
                          f"letters, digits, '-', '_', '.', starting and ending alphanumeric; quote numbers)")
            ok = False
        else:
            labels.append((k, v))
    exprs: list[tuple[str, str, frozenset[str]]] = []
    me = value.get("matchExpressions")
    if me is not None and not isinstance(me, list):
        errors.append(f"{path}.matchExpressions: must be a list of {{key, operator, values}}")
        ok = False
    for i, e in enumerate(me or []) if isinstance(me, list) else ():
        where = f"{path}.matchExpressions[{i}]"
        if not isinstance(e, dict):
            errors.append(f"{where}: must be {{key, operator, values}}")
            ok = False
            continue
        for k in e:
            if k not in ("key", "operator", "values"):
                errors.append(f"{where}.{k}: unknown field (known: key, operator, values)")
                ok = False
        key, op, values = e.get("key"), e.get("operator"), e.get("values")
        if not isinstance(key, str) or not _label_key(key):
            errors.append(f"{where}.key: {shown(key)} is not a valid label key")
            ok = False
        if op not in OPERATORS:
            errors.append(f"{where}.operator: must be one of {', '.join(OPERATORS)}, got {shown(op)}")
            ok = False
            continue
        if values is not None and (not isinstance(values, list) or not all(isinstance(x, str) for x in values)):
            errors.append(f"{where}.values: must be a list of strings (quote numbers)")
            ok = False
            continue
        if op in ("In", "NotIn") and not values:
            errors.append(f"{where}.values: operator {op} needs at least one value")
            ok = False
        elif op in ("Exists", "DoesNotExist") and values:
            errors.append(f"{where}.values: operator {op} takes no values")
            ok = False
        if ok:
            exprs.append((str(key), str(op), frozenset(values or ())))
    return Selector(tuple(sorted(labels)), tuple(exprs)) if ok else None


def _label_key(key: Any) -> bool:
    if not isinstance(key, str) or not LABEL_KEY.fullmatch(key):
        return False
    prefix, _, name = key.rpartition("/")
    return len(name) <= 63 and len(prefix) <= 253


def _label_value(value: str) -> bool:
    return len(value) <= 63 and LABEL_VALUE.fullmatch(value) is not None


MAX_PROBLEMS = 20  # problems a window's parse names (each shown() short), then how many more


def parse_window(obj: Mapping[str, Any]) -> tuple[Window | None, list[str]]:
    """The window, or None and every problem (field path first), for people to fix in one go."""
    errors: list[str] = []
    md = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(md, dict)
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return None, ["spec: required, with start, end and nodeSelector and/or nodes"]
    for key in spec:
        if key not in SPEC_FIELDS:
            errors.append(f"spec.{key}: unknown field (known: {', '.join(SPEC_FIELDS)})")
    times: dict[str, float] = {}
    for key in ("start", "end"):
        raw = spec.get(key)
        t = parse_time(raw)
        if raw is None:
            errors.append(f"spec.{key}: required, an RFC 3339 time with a zone like 2026-11-24T06:00:00Z")
        elif t is None:
            errors.append(f"spec.{key}: {shown(raw)} is not an RFC 3339 time with a zone (like 2026-11-24T06:00:00Z "
                          f"or 2026-11-24T07:00:00+01:00)")
        else:
            times[key] = t
    if len(times) == 2 and times["end"] <= times["start"]:
        errors.append(f"spec.end: {spec['end']} must be after spec.start ({spec['start']})")
    selector = None
    if "nodeSelector" in spec:
        selector = parse_selector(spec["nodeSelector"], "spec.nodeSelector", errors)
    nodes: list[str] = []
    raw_nodes = spec.get("nodes")
    if raw_nodes is not None:
        if not isinstance(raw_nodes, list):
            errors.append(f"spec.nodes: must be a list of node names, got {shown(raw_nodes)}")
        else:
            for i, n in enumerate(raw_nodes):
                if not isinstance(n, str) or len(n) > 253 or not NODE_NAME.fullmatch(n):
                    errors.append(f"spec.nodes[{i}]: {shown(n)} is not a node name")
                else:
                    nodes.append(n)
    if "nodeSelector" not in spec and not raw_nodes:
        errors.append("spec: name the nodes: spec.nodes (a list of node names) and/or spec.nodeSelector "
                      "(a label selector; {} selects every node)")
    reason = spec.get("reason", "")
    if not isinstance(reason, str):
        errors.append(f"spec.reason: must be a string, got {shown(reason)}")
        reason = ""
    elif len(reason) > 1024:
        errors.append(f"spec.reason: at most 1024 characters, got {len(reason)}")
    if errors:
        if len(errors) > MAX_PROBLEMS:  # (a list of 5,000 bad node names is one problem to fix)
            errors[MAX_PROBLEMS:] = [f"... and {len(errors) - MAX_PROBLEMS} more problems"]
        return None, errors
    return Window(
        name=str(md.get("name") or ""), uid=str(md.get("uid") or ""),
        start=times["start"], end=times["end"],
        start_text=str(spec["start"]), end_text=str(spec["end"]),
        selector=selector, nodes=frozenset(nodes), reason=reason,
    ), []


# -- the countdown ------------------------------------------------------------
def next_window(windows: Iterable[Window], node: str, labels: Mapping[str, str], now: float) -> Window | None:
    """The window that starts soonest among those ahead of (or active on) this node."""
    best: Window | None = None
    for w in windows:
        if w.end > now and w.covers(node, labels) and (best is None or w.start < best.start):
            best = w
    return best


def countdown(start: float, now: float, *, slack: float) -> int:
    """Whole minutes to write on a node whose next window starts at ``start``.

    Rounded down, with ``slack`` seconds held back: written at ``now``, the value
    stays at or below the real time left until ``now + slack`` at least, by when the
    reconciler has rewritten it (:func:`rewrite_at`). 0 once that is too close.
    """
    return max(int((start - now - slack) // 60), 0)


def rewrite_at(start: float, value: int) -> float:
    """When a countdown of ``value`` minutes stops being a safe (under-)statement."""
    return start - value * 60


def slack_for(start: float, now: float, *, minimum: float) -> float:
    """How much to hold back: ``minimum`` near a window, 2 % of the time left far from it,
    so a node with a window a week away is relabelled every few hours, not every minute."""
    return max(minimum, (start - now) * 0.02)


def minutes_needed(limit_seconds: int, margin_seconds: int) -> int:
    """The ``Gt`` operand for a pod with this limit: a node qualifies when its countdown
    (whole minutes, rounded down) is greater, i.e. at least limit + margin, rounded up."""
    return max(math.ceil((limit_seconds + margin_seconds) / 60) - 1, 0)


# -- what the reconciler records on running jobs ---------------------------------------------
def next_maintenance_text(window: Window, node: str) -> str:
    """The ``batchgate.io/next-maintenance`` value for a running job: compact JSON."""
    return json.dumps({"window": window.name, "start": format_time(window.start), "node": node},
                      separators=(",", ":"), sort_keys=True)


def read_next_maintenance(text: Any) -> tuple[str, float, str, str] | None:
    """(window, start epoch, start as written, node) from the annotation; None if absent or unreadable."""
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    start = parse_time(data.get("start"))
    if start is None:
        return None
    return str(data.get("window") or "?"), start, str(data["start"]), str(data.get("node") or "?")
