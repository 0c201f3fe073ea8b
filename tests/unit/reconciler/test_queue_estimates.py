"""A pass that estimates expected starts places the waiting work a second time only when some
runtime is expected to end before its limit (a prediction from history, or a workload's own
``batchgate.io/expected-runtime``); otherwise the queue's placement is the estimate, as placing
again would give."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.reconciler.reconbuild import HOUR, T0
from tests.unit.reconciler.test_queue import ONE, POLICY, busy, gated, queued_job
from tests.unit.reconciler.test_shadow import snap
from webhook.reconciler import planner
from webhook.reconciler.settings import Settings


def _placements(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    real = planner.shadow_schedule

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(k.get("runtimes"))
        return real(*a, **k)

    monkeypatch.setattr(planner, "shadow_schedule", counted)
    return calls


def _cluster(**job_annotations: str) -> Any:
    j = queued_job("big", pods=2, cpu="2")
    j["metadata"]["annotations"].update(job_annotations)
    group = {"batchgate.io/pod-group": "g", "batchgate.io/pod-group-size": "2"}
    return snap(busy("holder", "3"), j, gated("g-0", cpu="1", labels=group), gated("g-1", cpu="1", labels=group),
                gated("single", cpu="1", created=-2 * HOUR), nodes=ONE)


def test_without_a_runtime_to_expect_the_estimates_are_the_queues_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _placements(monkeypatch)
    s = _cluster()
    once = plan_actions(s)
    assert len(calls) == 1
    assert any(a.kind == "expected-start" for a in once)
    # history of another namespace predicts nothing here, but makes the pass place again: the same answers
    other = {("elsewhere", "batch", "program"): ((T0 - HOUR, "uid-elsewhere", 600.0),)}
    again = plan_actions(s, history=other)
    assert len(calls) == 3 and calls[2] is not None
    assert again == once


def test_a_workloads_own_expected_runtime_is_placed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _placements(monkeypatch)
    plan_actions(_cluster(**{"batchgate.io/expected-runtime": "10m"}))
    assert len(calls) == 2


def plan_actions(s: Any, **kw: Any) -> list[Any]:
    return planner.plan(s, T0, Settings(queues=POLICY), **kw).actions
