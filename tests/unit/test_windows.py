"""webhook/windows.py: the meaning of a MaintenanceWindow, the countdown and its rounding."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.windows import (
    Selector,
    countdown,
    minutes_needed,
    next_window,
    parse_selector,
    parse_time,
    parse_window,
    rewrite_at,
    slack_for,
)

T0 = parse_time("2026-11-24T06:00:00Z")
assert T0 is not None


def window(name: str = "w", **spec: Any) -> dict[str, Any]:
    base = {"start": "2026-11-24T06:00:00Z", "end": "2026-11-24T10:00:00Z", "nodes": ["n1"]}
    return {"apiVersion": "batchgate.io/v1alpha1", "kind": "MaintenanceWindow",
            "metadata": {"name": name, "uid": f"uid-{name}"}, "spec": {**base, **spec}}


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-24T06:00:00Z", T0),
    ("2026-11-24t06:00:00z", T0),
    ("2026-11-24T07:00:00+01:00", T0),
    ("2026-11-24T06:00:00.250Z", T0 + 0.25),
    ("2026-11-24T06:00:00", None),  # no zone
    ("2026-11-24 06:00:00Z", None),  # not the RFC 3339 separator
    ("tomorrow", None),
    (1764000000, None),
])
def test_parse_time(text: Any, expected: float | None) -> None:
    assert parse_time(text) == expected


def test_a_valid_window_parses_with_both_ways_of_naming_nodes() -> None:
    w, errors = parse_window(window(nodeSelector={"matchLabels": {"rack": "7"}}, nodes=["gpu-01"], reason="fw"))
    assert errors == [] and w is not None
    assert (w.start, w.end - w.start, w.reason) == (T0, 4 * 3600, "fw")
    assert w.covers("gpu-01", {}) and w.covers("x", {"rack": "7"}) and not w.covers("x", {"rack": "8"})
    assert w.describe() == "window w (2026-11-24T06:00:00Z .. 2026-11-24T10:00:00Z: fw)"
    assert [w.state(T0 - 1), w.state(T0), w.state(w.end)] == ["Scheduled", "Active", "Finished"]


def test_every_problem_is_reported_at_once() -> None:
    w, errors = parse_window(window(start="2026-11-24T10:00:00Z", end="2026-11-24T06:00:00Z",
                                    nodes="n1", extra=1))
    assert w is None
    assert errors == [
        "spec.extra: unknown field (known: start, end, nodeSelector, nodes, reason)",
        "spec.end: 2026-11-24T06:00:00Z must be after spec.start (2026-11-24T10:00:00Z)",
        "spec.nodes: must be a list of node names, got 'n1'",
    ]


def test_a_window_without_nodes_or_spec_is_refused() -> None:
    assert parse_window({"metadata": {"name": "x"}})[1] == [
        "spec: required, with start, end and nodeSelector and/or nodes"]
    spec = window()
    del spec["spec"]["nodes"]
    assert "spec: name the nodes" in parse_window(spec)[1][0]


@pytest.mark.parametrize(("selector", "labels", "matches"), [
    ({}, {}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
])
def test_selector_semantics_are_kubernetes(selector: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    errors: list[str] = []
    parsed = parse_selector(selector, "s", errors)
    assert errors == [] and parsed is not None
    assert parsed.matches(labels) is matches


def test_selector_errors_name_the_field() -> None:
    errors: list[str] = []
    assert parse_selector({"matchLabels": {"k": 7}, "matchExpressions": [{"key": "k", "operator": "In"}]},
                          "spec.nodeSelector", errors) is None
    assert errors == [
        "spec.nodeSelector.matchLabels.k: 7 is not a valid label value (63 characters at most, letters, digits, "
        "'-', '_', '.', starting and ending alphanumeric; quote numbers)",
        "spec.nodeSelector.matchExpressions[0].values: operator In needs at least one value",
    ]
    assert str(Selector((("rack", "7"),), (("gpu", "Exists", frozenset()),))) == "rack=7,gpu"


def test_the_countdown_never_overstates_the_time_left_until_its_rewrite() -> None:
    start = T0
    for left in (30, 59, 61, 179, 600, 3600, 86400, 7 * 86400):
        now = start - left
        slack = slack_for(start, now, minimum=120)
        value = countdown(start, now, slack=slack)
        assert value * 60 <= left - slack or value == 0
        due = rewrite_at(start, value)
        assert due >= now + slack or value == 0  # not rewritten sooner than the slack
        for t in (now, (now + due) / 2, due):  # still an under-statement until it is rewritten
            assert value * 60 <= start - t + 1e-9


def test_far_windows_are_relabelled_rarely() -> None:
    now = T0 - 7 * 86400
    value = countdown(T0, now, slack=slack_for(T0, now, minimum=120))
    assert rewrite_at(T0, value) - now >= 3 * 3600


@pytest.mark.parametrize(("limit", "margin", "operand"), [
    (3600, 0, 59),  # needs a countdown of at least 60 minutes: Gt 59
    (3600, 60, 60),
    (3601, 0, 60),
    (1, 0, 0),
    (0, 0, 0),
])
def test_minutes_needed(limit: int, margin: int, operand: int) -> None:
    assert minutes_needed(limit, margin) == operand


def test_next_window_is_the_earliest_still_ahead_on_that_node() -> None:
    a, _ = parse_window(window("a", start="2026-11-25T06:00:00Z", end="2026-11-25T07:00:00Z"))
    b, _ = parse_window(window("b"))
    c, _ = parse_window(window("c", start="2026-11-20T06:00:00Z", end="2026-11-20T07:00:00Z"))
    d, _ = parse_window(window("d", start="2026-11-24T00:00:00Z", end="2026-11-24T01:00:00Z", nodes=["n2"]))
    ws = [w for w in (a, b, c, d) if w is not None]
    assert next_window(ws, "n1", {}, T0 - 3600) is b
    assert next_window(ws, "n1", {}, T0 + 3600) is b  # active
    assert next_window(ws, "n1", {}, T0 + 5 * 3600) is a
    assert next_window(ws, "n3", {}, T0) is None
