"""Deadlines: table-driven planner cases with a fake clock (``now`` is an offset from T0)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from reconbuild import HOUR, T0, deadline_ann, job, pod, running, snapshot, terminated, ts

from webhook.contract import DEADLINE_ANNOTATION, STARTED_AT_ANNOTATION, WARNED_FOR_ANNOTATION
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import QueuePolicy, Settings

SETTINGS = Settings(warning_lead=600)
QUEUES = QueuePolicy(max_time_limit={"batch": 7 * 24 * HOUR, "interactive": 12 * HOUR}, default_queue="batch",
                     excluded_namespaces=("kube-system",))


@dataclass
class Case:
    id: str
    objects: list[dict[str, Any]]
    now: float  # seconds after T0
    want: list[tuple[str, str, str]]  # (action kind, target name, reason)
    annotations: dict[str, dict[str, str | None]] = field(default_factory=dict)  # target name -> patch
    message: str = ""  # substring of the first action's message
    wake: float | None = None  # expected wake_at offset, when given
    settings: Settings = SETTINGS


J = job("train", annotations=deadline_ann("4h"))
J_RECORDED = job("train", annotations=deadline_ann("4h", started=0, deadline=4 * HOUR))
J_WARNED = job("train", annotations=deadline_ann("4h", started=0, deadline=4 * HOUR, warned=4 * HOUR))

CASES = [
    Case("pending pod: the clock has not started", [pod("p", phase="Pending", started=None,
         annotations=deadline_ann("1h"))], 10, []),
    Case("pending pod whose start was recorded: the clock keeps running",
         [pod("p", phase="Pending", started=None, annotations=deadline_ann("1h", started=0, deadline=HOUR, warned=HOUR))],
         2 * HOUR, [("stop", "p", "TimeLimitExceeded")]),
    Case("no time limit: nothing to do", [pod("p")], 10 * HOUR, []),
    Case("malformed time limit is left to the webhook", [pod("p", annotations=deadline_ann("soon"))], 10 * HOUR, []),
    Case("running bare pod, first seen: deadline recorded",
         [pod("p", started=0, annotations=deadline_ann("1h"))], 60,
         [("record-deadline", "p", "DeadlineSet")],
         annotations={"p": {STARTED_AT_ANNOTATION: ts(0), DEADLINE_ANNOTATION: ts(HOUR)}},
         message="stopped at 2024-05-01T11:00:00Z", wake=HOUR - 600),
    Case("recorded, before the warning: steady, wakes at the warning",
         [pod("p", annotations=deadline_ann("1h", started=0, deadline=HOUR))], 60, [], wake=HOUR - 600),
    Case("recorded, warning due", [pod("p", annotations=deadline_ann("1h", started=0, deadline=HOUR))],
         HOUR - 300, [("warn", "p", "TimeLimitApproaching")], annotations={"p": {WARNED_FOR_ANNOTATION: ts(HOUR)}},
         message="(in 5m)", wake=HOUR),
    Case("warned: steady until the deadline",
         [pod("p", annotations=deadline_ann("1h", started=0, deadline=HOUR, warned=HOUR))], HOUR - 1, [], wake=HOUR),
    Case("deadline reached: the pod is deleted",
         [pod("p", annotations=deadline_ann("1h", started=0, deadline=HOUR, warned=HOUR))], HOUR,
         [("stop", "p", "TimeLimitExceeded")], message="time limit 1h ran out at 2024-05-01T11:00:00Z"),
    Case("deadline passed while the reconciler was down, nothing recorded: stopped on start",
         [pod("p", started=0, annotations=deadline_ann("1h"))], 5 * HOUR, [("stop", "p", "TimeLimitExceeded")]),
    Case("first seen with less than the warning lead left: recorded and warned at once",
         [pod("p", started=0, annotations=deadline_ann("1h"))], HOUR - 60,
         [("record-deadline", "p", "DeadlineSet"), ("warn", "p", "TimeLimitApproaching")]),
    Case("finished pod is left alone", [pod("p", phase="Succeeded", containers=[terminated(0)],
         annotations=deadline_ann("1h"))], 5 * HOUR, []),
    Case("pod already being deleted is not deleted again",
         [pod("p", deleting=True, annotations=deadline_ann("1h", started=0, deadline=HOUR))], 5 * HOUR, []),
    Case("excluded namespace is never touched",
         [pod("p", ns="kube-system", started=0, annotations=deadline_ann("1h"))], 5 * HOUR, [],
         settings=Settings(queues=QUEUES)),
    Case("running without any start time: counts from now",
         [pod("p", containers=[], started=None, annotations=deadline_ann("1h"))], 100,
         [("record-deadline", "p", "DeadlineSet")], annotations={"p": {STARTED_AT_ANNOTATION: ts(100), DEADLINE_ANNOTATION: ts(100 + HOUR)}}),
    Case("job: the clock starts with its first pod, annotations go on the Job",
         [J, pod("a", owner=J, started=300, annotations=deadline_ann("4h")), pod("b", owner=J, started=120)], 400,
         [("record-deadline", "train", "DeadlineSet")],
         annotations={"train": {STARTED_AT_ANNOTATION: ts(120), DEADLINE_ANNOTATION: ts(120 + 4 * HOUR)}}),
    Case("job's pods are not jobs themselves",
         [J_WARNED, pod("a", owner=J, started=0, annotations=deadline_ann("1h"))], 2 * HOUR, []),
    Case("job past its deadline is deleted with background propagation",
         [J_WARNED, pod("a", owner=J, started=0)], 4 * HOUR + 1, [("stop", "train", "TimeLimitExceeded")],
         message="deleting the Job"),
    Case("init container start counts as running",
         [pod("p", phase="Pending", started=None, annotations=deadline_ann("1h"),
              containers=[]) | {"status": {"phase": "Pending", "initContainerStatuses": [running(30, "stage")]}}],
         60, [("record-deadline", "p", "DeadlineSet")], annotations={"p": {STARTED_AT_ANNOTATION: ts(30), DEADLINE_ANNOTATION: ts(30 + HOUR)}}),
    Case("job not started yet: nothing", [J, pod("a", owner=J, phase="Pending", started=None)], HOUR, []),
    Case("job's pods gone but start recorded: the clock keeps running", [J_WARNED], 4 * HOUR, [("stop", "train", "TimeLimitExceeded")]),
    Case("completed job is left alone",
         [job("train", annotations=deadline_ann("1h", started=0, deadline=HOUR), finished="Complete")], 5 * HOUR, []),
    Case("job being deleted is left alone",
         [job("train", annotations=deadline_ann("1h", started=0, deadline=HOUR), deleting=True)], 5 * HOUR, []),
    Case("time limit only in the Job's pod template still counts",
         [job("train", template_annotations=deadline_ann("1h")), pod("a", owner=J, started=0)], 2 * HOUR,
         [("stop", "train", "TimeLimitExceeded")]),
    Case("extension: a longer limit moves the deadline and says so",
         [job("train", annotations=deadline_ann("6h", started=0, deadline=4 * HOUR, warned=4 * HOUR)),
          pod("a", owner=J, started=0)], 3 * HOUR + 55 * 60,
         [("record-deadline", "train", "TimeLimitExtended")],
         annotations={"train": {DEADLINE_ANNOTATION: ts(6 * HOUR)}}, message="from 2024-05-01T14:00:00Z to 2024-05-01T16:00:00Z",
         wake=6 * HOUR - 600),
    Case("extension near the new deadline: recorded and warned anew",
         [job("train", annotations=deadline_ann("5h", started=0, deadline=4 * HOUR, warned=4 * HOUR)),
          pod("a", owner=J, started=0)], 5 * HOUR - 100,
         [("record-deadline", "train", "TimeLimitExtended"), ("warn", "train", "TimeLimitApproaching")]),
    Case("extension written while the reconciler was down is honoured",
         [job("train", annotations=deadline_ann("4h", started=0, deadline=2 * HOUR)),
          pod("a", owner=J, started=0)], 3 * HOUR, [("record-deadline", "train", "TimeLimitExtended")]),
    Case("a shorter limit moves the deadline earlier",
         [job("train", annotations=deadline_ann("2h", started=0, deadline=4 * HOUR)), pod("a", owner=J, started=0)],
         HOUR, [("record-deadline", "train", "TimeLimitReduced")], annotations={"train": {DEADLINE_ANNOTATION: ts(2 * HOUR)}}),
    Case("a forged later start is not believed while pods show the real one",
         [job("train", annotations=deadline_ann("4h", started=2 * HOUR, deadline=6 * HOUR)), pod("a", owner=J, started=0)],
         HOUR, [("record-deadline", "train", "TimeLimitReduced")],
         annotations={"train": {STARTED_AT_ANNOTATION: ts(0), DEADLINE_ANNOTATION: ts(4 * HOUR)}}),
    Case("recorded start earlier than today's pods stands (pods were replaced)",
         [J_RECORDED, pod("a", owner=J, started=2 * HOUR)], 3 * HOUR, []),
    Case("a limit over the queue maximum is capped",
         [pod("p", started=0, labels={"batchgate.io/queue": "interactive"}, annotations=deadline_ann("2d"))], 13 * HOUR,
         [("stop", "p", "TimeLimitExceeded")], message="over the maximum 12h of queue interactive",
         settings=Settings(queues=QUEUES)),
    Case("queue cap can be switched off",
         [pod("p", started=0, labels={"batchgate.io/queue": "interactive"}, annotations=deadline_ann("2d", started=0,
          deadline=48 * HOUR))], 13 * HOUR, [], settings=Settings(queues=QUEUES, enforce_queue_max=False)),
    Case("unlabelled pod takes the default queue's cap",
         [pod("p", started=0, annotations=deadline_ann("30d", started=0, deadline=30 * 24 * HOUR))], 7 * 24 * HOUR,
         [("stop", "p", "TimeLimitExceeded")], settings=Settings(queues=QUEUES)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_deadlines(case: Case) -> None:
    result = plan(snapshot(*case.objects), T0 + case.now, case.settings)
    got = [(a.kind, a.target.name, a.reason) for a in result.actions]
    assert got == case.want
    for name, patch in case.annotations.items():
        patches = [a.annotations for a in result.actions if a.target.name == name and a.annotations]
        assert patches and patches[0] == patch
    if case.message:
        assert case.message in result.actions[0].message
    if case.wake is not None:
        assert result.wake_at == T0 + case.wake


def test_stop_deletes_with_uid_precondition_and_propagation() -> None:
    j = job("train", annotations=deadline_ann("1h", started=0, deadline=HOUR, warned=HOUR))
    p = pod("lone", annotations=deadline_ann("1h", started=0, deadline=HOUR, warned=HOUR))
    actions = plan(snapshot(j, p), T0 + HOUR, SETTINGS).actions
    deletes = {a.target.name: a.deletes for a in actions}
    assert [(d.ref.uid, d.propagation) for d in deletes["train"]] == [("uid-demo-train", "Background")]
    assert [(d.ref.uid, d.propagation) for d in deletes["lone"]] == [("uid-demo-lone", None)]
    assert all(a.event_type == "Warning" for a in actions)


def test_writes_are_fenced_by_the_resource_version_they_were_planned_on() -> None:
    p = pod("p", started=0, annotations=deadline_ann("1h"), rv="4711")
    (a,) = plan(snapshot(p), T0 + 60, SETTINGS).actions
    assert a.resource_version == "4711"


def test_same_deadline_same_event_name_new_deadline_new_name() -> None:
    """The Event name is what makes a re-run after a crash find its Event instead of repeating it."""
    objs = [pod("p", started=0, annotations=deadline_ann("1h", started=0, deadline=HOUR))]
    first = plan(snapshot(*objs), T0 + HOUR - 300, SETTINGS).actions[0]
    again = plan(snapshot(*objs), T0 + HOUR - 200, SETTINGS).actions[0]
    assert first.event_name() == again.event_name()
    extended = [pod("p", started=0, annotations=deadline_ann("2h", started=0, deadline=2 * HOUR))]
    later = plan(snapshot(*extended), T0 + 2 * HOUR - 300, SETTINGS).actions[0]
    assert later.reason == first.reason and later.event_name() != first.event_name()
    assert first.event_name().startswith("p.bg-")


def test_bookkeeping_is_spread_over_passes_but_stops_never_wait() -> None:
    fresh = [pod(f"new-{i}", started=0, annotations=deadline_ann("1h")) for i in range(5)]
    late = [pod(f"late-{i}", started=-2 * HOUR, annotations=deadline_ann("1h")) for i in range(3)]
    result = plan(snapshot(*fresh, *late), T0 + 60, Settings(max_bookkeeping_per_pass=2))
    kinds = [a.kind for a in result.actions]
    assert kinds.count("stop") == 3 and kinds.count("record-deadline") == 2
    assert result.deferred == 3 and result.wake_at == T0 + 60  # the rest right away
    assert plan(snapshot(*fresh), T0 + 60, SETTINGS).deferred == 0
