"""Kubernetes label selectors (``matchLabels`` + ``matchExpressions``), as the API server
evaluates and kubectl prints them: one definition for the node selectors of maintenance windows
and the namespace selectors of queue grants. Pure: plain data in, a bool or a string out."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def matches(match_labels: Iterable[tuple[str, str]],
            match_expressions: Iterable[tuple[str, str, Collection[str]]],
            labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy every label and every expression (an empty selector matches
    everything). ``NotIn`` and ``DoesNotExist`` match an object without the key."""
    for k, v in match_labels:
        if labels.get(k) != v:
            return False
    for key, op, values in match_expressions:
        value = labels.get(key)
        if op == "In" and value not in values:
            return False
        if op == "NotIn" and value is not None and value in values:
            return False
        if op == "Exists" and value is None:
            return False
        if op == "DoesNotExist" and value is not None:
            return False
    return True


def text(match_labels: Iterable[tuple[str, str]],
         match_expressions: Iterable[tuple[str, str, Iterable[str]]], empty: str) -> str:
    """As kubectl writes a selector: ``team=a,tier in (gold,silver),!legacy``; ``empty`` for
    the selector that selects everything. Values in the order given."""
    parts = [f"{k}={v}" for k, v in match_labels]
    for key, op, values in match_expressions:
        vals = ",".join(values)
        parts.append({"In": f"{key} in ({vals})", "NotIn": f"{key} notin ({vals})",
                      "Exists": key, "DoesNotExist": f"!{key}"}[op])
    return ",".join(parts) or empty
