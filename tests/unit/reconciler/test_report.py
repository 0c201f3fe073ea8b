"""batchgate queue / maintenance: the rows and how they print (pure; the CLI only lists the cluster)."""

from __future__ import annotations

import json

from tests.unit.reconciler.reconbuild import HOUR, T0, ts
from tests.unit.reconciler.test_shadow import node, running, waiting
from webhook.cli import build_parser
from webhook.reconciler.model import Snapshot, job_view, pod_view, window_view
from webhook.reconciler.report import (
    MAINTENANCE_COLUMNS,
    QUEUE_COLUMNS,
    QUEUE_WIDE,
    maintenance_rows,
    queue_rows,
    render,
    summarize,
)


def cluster(*windows: dict) -> Snapshot:  # type: ignore[type-arg]
    r = running("r1", "n1", limit="2h", cpu="4")
    r["metadata"]["annotations"]["batchgate.io/deadline"] = ts(HOUR)
    objs = [r, waiting("w1", cpu="4"), waiting("w2", cpu="4", priority=10, created=-60), waiting("huge", cpu="64")]
    return Snapshot.of(pods=[pod_view(o) for o in objs], jobs=[job_view(o) for o in objs if o["kind"] == "Job"],
                       nodes=[node("n1")], windows=[window_view(w) for w in windows])


def mw(start: float, end: float) -> dict:  # type: ignore[type-arg]
    return {"apiVersion": "batchgate.io/v1alpha1", "kind": "MaintenanceWindow",
            "metadata": {"name": "fw", "uid": "uid-fw"},
            "spec": {"start": ts(start), "end": ts(end), "nodes": ["n1"], "reason": "firmware"}}


def test_queue_lists_pending_work_in_order_then_running_work() -> None:
    rows = queue_rows(cluster(), T0)
    assert [(r["name"], r["state"], r["position"], r["start"]) for r in rows] == [
        ("w2", "Pending", 1, ts(HOUR)), ("huge", "Pending", 2, "unknown"), ("w1", "Pending", 3, ts(2 * HOUR)),
        ("r1", "Running", None, ts(-HOUR))]
    assert rows[1]["reason"].startswith("never fits: each pod asks for cpu 64")
    assert rows[3]["deadline"] == ts(HOUR) and rows[3]["reason"] == "on n1"
    text = render(rows, "table", QUEUE_COLUMNS, QUEUE_WIDE)
    assert text.splitlines()[0].split() == ["NAMESPACE", "NAME", "QUEUE", "PRIORITY", "POS", "STATE", "START",
                                            "DEADLINE", "REASON"]
    assert "KIND" in render(rows, "wide", QUEUE_COLUMNS, QUEUE_WIDE).splitlines()[0]
    assert json.loads(render(rows, "json", QUEUE_COLUMNS))[0]["name"] == "w2"
    assert queue_rows(cluster(), T0, namespace="elsewhere") == []


def test_maintenance_names_what_a_window_stops_and_holds_back() -> None:
    (row,) = maintenance_rows(cluster(mw(30 * 60, HOUR + 30 * 60)), T0)
    assert (row["name"], row["state"], row["nodes"], row["reason"]) == ("fw", "Scheduled", ["n1"], "firmware")
    assert row["stops"] == ["Pod demo/r1"]  # its deadline is after the window's start
    assert row["holds"] == ["Pod demo/w1", "Pod demo/w2"]  # they start later because of it
    (s,) = summarize([row])
    assert (s["nodes"], s["stops"], s["holds"]) == (1, 1, 2)
    assert "HOLDS BACK" in render([s], "table", MAINTENANCE_COLUMNS)


def test_the_cli_takes_the_contracts_flags() -> None:
    args = build_parser().parse_args(["queue", "--namespace", "demo", "-o", "wide"])
    assert (args.command, args.namespace, args.output) == ("queue", "demo", "wide")
    args = build_parser().parse_args(["maintenance", "-o", "json", "--kubeconfig", "k"])
    assert (args.command, args.output, args.kubeconfig) == ("maintenance", "json", "k")


def test_queue_shows_the_queue_work_was_admitted_to_not_its_label() -> None:
    """Issue 27: the label is anyone's to change who may update the object; the record is not."""
    r = running("r1", "n1", limit="2h", cpu="4")
    r["metadata"].setdefault("labels", {})["batchgate.io/queue"] = "interactive"  # relabelled after admission
    r["spec"]["containers"][0]["env"] = [{"name": "BATCHGATE_QUEUE", "value": "scavenger"},
                                        {"name": "BATCHGATE_TIME_LIMIT", "value": "2h"}]
    w = waiting("w1", cpu="4")
    w["metadata"].setdefault("labels", {})["batchgate.io/queue"] = "interactive"
    w["spec"]["containers"][0].pop("env", None)  # no record (admitted before records existed): the label
    rows = queue_rows(Snapshot.of(pods=[pod_view(r), pod_view(w)], nodes=[node("n1")]), T0)
    assert {row["name"]: row["queue"] for row in rows} == {"r1": "scavenger", "w1": "interactive"}
