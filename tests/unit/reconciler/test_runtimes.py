"""Runtime predictions from finished work (runtimes.py), and the shadow schedule using them."""

from __future__ import annotations

from typing import Any

import pytest
from fakeapi import FakeApi

from tests.unit.reconciler.reconbuild import HOUR, T0, job, pod, terminated, ts
from tests.unit.reconciler.test_shadow import node, running, snap, waiting, with_spec
from webhook.contract import EXPECTED_START_ANNOTATION
from webhook.reconciler import runtimes
from webhook.reconciler.controller import Controller
from webhook.reconciler.model import Snapshot, job_view, pod_view
from webhook.reconciler.planner import plan
from webhook.reconciler.runtimes import Predictor, Run, corrected, finished_runs, key_of, remember
from webhook.reconciler.settings import Settings
from webhook.reconciler.shadow import shadow_schedule

MIN = 60
DAY = 24 * HOUR


def done_job(name: str, *, started: float | None, completed: float, image: str = "sim:1", ns: str = "demo",
             condition: str = "Complete", queue: str | None = None, owner_kind: str | None = None) -> dict[str, Any]:
    ann = {"batchgate.io/time-limit": "2h"}
    if started is not None:
        ann["batchgate.io/started-at"] = ts(started)
    j = job(name, ns=ns, annotations=ann, finished=condition, labels={"batchgate.io/queue": queue} if queue else None)
    for c in j["spec"]["template"]["spec"]["containers"]:
        c["image"] = image  # the admission record (queue batch) stays
    j["status"]["completionTime"] = ts(completed)
    if owner_kind:
        j["metadata"]["ownerReferences"] = [{"apiVersion": "batchgate.io/v1alpha1", "kind": owner_kind, "name": "s",
                                             "uid": "uid-s", "controller": True}]
    return j


def a_job(name: str, *, limit: str = "2h", image: str = "sim:1", started: float | None = None,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    ann = {"batchgate.io/time-limit": limit, **(annotations or {})}
    if started is not None:
        ann["batchgate.io/started-at"] = ts(started)
    j = job(name, uid=f"uid-{name}", annotations=ann)
    for c in j["spec"]["template"]["spec"]["containers"]:
        c["image"] = image
    return j


def of(*objs: dict[str, Any]) -> Snapshot:
    return Snapshot.of(pods=[pod_view(o) for o in objs if o["kind"] == "Pod"],
                       jobs=[job_view(o) for o in objs if o["kind"] == "Job"])


# -- what counts as a run -------------------------------------------------------------------
def test_a_complete_job_is_a_run_from_its_recorded_start_to_its_completion_time() -> None:
    (r,) = finished_runs(of(done_job("a", started=-3 * HOUR, completed=-2 * HOUR)))
    assert (r.key, r.seconds) == (("demo", "batch", "sim:1"), HOUR)  # the queue it was admitted to


def test_without_a_recorded_start_the_earliest_pod_start_counts_and_without_either_nothing() -> None:
    j = done_job("a", started=None, completed=-HOUR)
    p = pod("a-1", owner=j, phase="Succeeded", containers=[terminated(0, started=-HOUR - 20 * MIN, finished=-HOUR)])
    (r,) = finished_runs(of(j, p))
    assert r.seconds == 20 * MIN
    assert finished_runs(of(done_job("b", started=None, completed=-HOUR))) == []


def test_failed_and_unfinished_jobs_and_scavenger_segments_teach_nothing() -> None:
    assert finished_runs(of(done_job("f", started=-HOUR, completed=0, condition="Failed"),
                            done_job("s", started=-HOUR, completed=0, owner_kind="ScavengerJob"),
                            a_job("r", started=-HOUR))) == []


def test_a_succeeded_bare_pod_is_a_run_and_a_failed_one_is_not() -> None:
    ok = pod("ok", phase="Succeeded", containers=[terminated(0, started=-HOUR, finished=-HOUR + 7 * MIN)])
    bad = pod("bad", phase="Failed", containers=[terminated(1, started=-HOUR, finished=-HOUR + 2 * MIN)])
    (r,) = finished_runs(of(ok, bad))
    assert (r.key, r.seconds) == (("demo", "", "busybox"), 7 * MIN)


def test_a_node_clock_ahead_of_the_control_plane_never_makes_a_run_negative() -> None:
    (r,) = finished_runs(of(done_job("a", started=-HOUR, completed=-2 * HOUR)))
    assert r.seconds == 0


# -- the history and the prediction ---------------------------------------------------------
K = key_of("demo", None, "sim:1")


def test_the_history_keeps_the_last_five_runs_per_key_each_once() -> None:
    h = remember({}, [Run(K, u, 0, end) for u, end in (("a", 100), ("b", 600), ("c", 200), ("d", 300), ("e", 400),
                                                       ("f", 500))])
    assert [uid for _, uid, _ in h[K]] == ["c", "d", "e", "f", "b"]  # by end time: a ended first, and is forgotten
    assert remember(h, [Run(K, "b", 0, 600)]) == h


def test_the_history_forgets_the_keys_that_ended_longest_ago_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtimes, "MAX_KEYS", 2)
    h = remember({}, [Run(key_of("ns", None, p), p, 0, end) for p, end in (("x", 30), ("y", 10), ("z", 20))])
    assert sorted(k[2] for k in h) == ["x", "z"]


def test_the_prediction_is_the_average_of_the_last_two_runs_never_past_the_limit() -> None:
    p = Predictor.of(remember({}, [Run(K, "a", 0, 10 * MIN), Run(K, "b", 0, 30 * MIN), Run(K, "c", 0, 50 * MIN)]))
    assert p.predict(K, 2 * HOUR) == 40 * MIN
    assert p.predict(K, 30 * MIN) == 30 * MIN
    assert p.predict(K, None) == 40 * MIN


def test_the_likely_runtime_is_the_median_the_geometric_mean_of_the_last_five_runs_never_past_the_limit() -> None:
    """A start time is a median: runtimes skewed right (one run far longer) have a mean above it."""
    p = Predictor.of(remember({}, [Run(K, u, i * DAY, i * DAY + m * MIN) for i, (u, m) in enumerate(
        (("a", 1000), ("b", 10), ("c", 10), ("d", 10), ("e", 40), ("f", 40)))]))
    assert p.likely(K, 2 * HOUR) == pytest.approx(10 ** 0.6 * 40 ** 0.4 * MIN)  # a is forgotten: about 17.4 min
    assert p.predict(K, 2 * HOUR) == 40 * MIN  # the mean of the last two, as Tsafrir et al.
    assert p.likely(K, 15 * MIN) == 15 * MIN
    two = Predictor.of(remember({}, [Run(K, "a", 0, 10 * MIN), Run(K, "b", 0, 40 * MIN)]))
    assert two.likely(K, None) == pytest.approx(20 * MIN) and two.predict(K, None) == 25 * MIN
    assert Predictor.of(remember({}, [Run(K, "a", 0, 0)])).likely(K, None) == 1.0  # under a second counts as one
    assert two.likely(key_of("demo", None, "new:2"), None) == pytest.approx(20 * MIN)  # the namespace and queue's
    assert two.likely(key_of("nobody", None, "sim:1"), None) is None


def test_another_program_in_the_same_namespace_and_queue_is_the_fallback_and_else_there_is_none() -> None:
    p = Predictor.of(remember({}, [Run(K, "a", 0, 10 * MIN), Run(key_of("other", None, "sim:1"), "b", 0, HOUR)]))
    assert p.predict(key_of("demo", None, "new:2"), 2 * HOUR) == 10 * MIN
    assert p.predict(key_of("demo", "gpu", "sim:1"), 2 * HOUR) is None
    assert p.predict(key_of("nobody", None, "sim:1"), 2 * HOUR) is None


def test_a_job_that_outlives_its_prediction_is_expected_halfway_between_now_and_its_limit() -> None:
    assert corrected(10 * MIN, 5 * MIN, HOUR) == 10 * MIN
    assert corrected(10 * MIN, 10 * MIN, HOUR) == 35 * MIN  # proved wrong: the middle of what is left
    assert corrected(10 * MIN, 50 * MIN, HOUR) == 55 * MIN
    assert corrected(10 * MIN, 2 * HOUR, HOUR) == 2 * HOUR  # past its limit: it ends now


# -- the shadow schedule with predictions ---------------------------------------------------
def history(seconds: float, image: str = "busybox") -> Predictor:
    return Predictor.of(remember({}, [Run(key_of("demo", "batch", image), "r", T0 - 2 * HOUR, T0 - 2 * HOUR + seconds)]))


def starts(s: Snapshot, predictor: Predictor | None, windows: list[Any] = ()) -> dict[str, float | None]:  # type: ignore[assignment]
    return {e.workload.name: None if e.start is None else e.start - T0
            for e in shadow_schedule(s, T0, windows, runtimes=predictor)}


def test_running_work_frees_its_node_when_predicted_and_pending_work_holds_it_as_long_as_predicted() -> None:
    s = snap(running("r1", "n1", limit="2h", cpu="4", started=-HOUR),
             waiting("w1", cpu="4", limit="2h", created=-2 * HOUR), waiting("w2", cpu="4", limit="2h"), nodes=[node("n1")])
    assert starts(s, None) == {"w1": HOUR, "w2": 3 * HOUR}  # to the limit, as Slurm's squeue --start
    assert starts(s, history(70 * MIN)) == {"w1": 10 * MIN, "w2": 80 * MIN}


def test_work_ahead_is_placed_for_its_median_runtime_not_its_mean() -> None:
    """Runs of 10 and 40 minutes: the mean 25, the median (geometric mean) 20. The running job and
    the one waiting ahead each hold their node for 20 minutes in the estimate."""
    key = key_of("demo", "batch", "busybox")
    runs = Predictor.of(remember({}, [Run(key, "a", T0 - 3 * HOUR, T0 - 3 * HOUR + 10 * MIN),
                                      Run(key, "b", T0 - 2 * HOUR, T0 - 2 * HOUR + 40 * MIN)]))
    s = snap(running("r1", "n1", limit="2h", cpu="4", started=-5 * MIN),
             waiting("w1", cpu="4", limit="2h", created=-2 * HOUR), waiting("w2", cpu="4", limit="2h"), nodes=[node("n1")])
    got = starts(s, runs)
    assert got["w1"] == pytest.approx(15 * MIN) and got["w2"] == pytest.approx(35 * MIN)


def test_a_prediction_is_never_past_the_deadline() -> None:
    s = snap(running("r1", "n1", limit="2h", cpu="4", started=-HOUR), waiting("w1", cpu="4"), nodes=[node("n1")])
    assert starts(s, history(5 * HOUR)) == {"w1": HOUR}


def test_a_job_that_outlives_its_prediction_is_expected_halfway_to_its_deadline_at_the_next_pass() -> None:
    s = snap(running("r1", "n1", limit="2h", cpu="4", started=-75 * MIN, created=-2 * HOUR), waiting("w1", cpu="4"),
             nodes=[node("n1")])
    assert starts(s, history(70 * MIN)) == {"w1": 22.5 * MIN}  # 45 minutes left of its 2 hours: half of them


def test_windows_still_go_by_the_time_limit() -> None:
    from webhook.windows import parse_window
    w, _ = parse_window({"metadata": {"name": "fw"}, "spec": {"start": ts(2 * HOUR), "end": ts(3 * HOUR),
                                                              "nodes": ["n1"]}})
    s = snap(waiting("long", limit="4h", cpu="4"), nodes=[node("n1")])
    assert starts(s, history(10 * MIN), [w]) == {"long": 3 * HOUR}  # predicted 10 min, but may run 4 h


def test_the_estimate_written_uses_the_history_of_a_finished_job_in_the_snapshot() -> None:
    finished = done_job("before", started=-3 * HOUR, completed=-3 * HOUR + 20 * MIN, image="busybox")
    s0 = snap(running("r1", "n1", limit="2h", cpu="4", started=-10 * MIN), waiting("w1", cpu="4"), nodes=[node("n1")])
    s = Snapshot(pods=s0.pods, jobs={("demo", "before"): job_view(finished)}, nodes=s0.nodes)
    est = {a.target.name: a.annotations for a in plan(s, T0, Settings()).actions if a.kind == "expected-start"}
    assert est["w1"][EXPECTED_START_ANNOTATION] == ts(10 * MIN)  # type: ignore[index]
    est = {a.target.name: a.annotations for a in plan(s, T0, Settings(runtime_prediction=False)).actions
           if a.kind == "expected-start"}
    assert est["w1"][EXPECTED_START_ANNOTATION] == ts(110 * MIN)  # type: ignore[index]


def test_the_history_the_controller_remembers_counts_when_the_job_is_gone() -> None:
    s = snap(running("r1", "n1", limit="2h", cpu="4", started=-10 * MIN), waiting("w1", cpu="4"), nodes=[node("n1")])
    h = remember({}, [Run(key_of("demo", "batch", "busybox"), "gone", T0 - HOUR, T0 - HOUR + 30 * MIN)])
    (a,) = [a for a in plan(s, T0, Settings(), history=h).actions if a.kind == "expected-start"]
    assert a.annotations[EXPECTED_START_ANNOTATION] == ts(20 * MIN)  # type: ignore[index]


def test_the_key_takes_the_queue_a_workload_was_admitted_to_over_a_label_edited_since() -> None:
    j = a_job("relabelled")
    j["metadata"]["labels"] = {"batchgate.io/queue": "interactive"}  # edited after admission to batch
    assert runtimes.job_key(job_view(j)) == ("demo", "batch", "sim:1")
    bare = pod("bare", phase="Pending", started=None, labels={"batchgate.io/queue": "interactive"}, admitted=None)
    assert runtimes.pod_key(pod_view(bare)) == ("demo", "interactive", "busybox")  # no record: the label


# -- runs stopped at their limit: censored, but history all the same ------------------------------
def test_a_job_stopped_at_its_deadline_is_a_run_at_its_limit_in_the_plan() -> None:
    j = a_job("long", limit="2h", annotations={"batchgate.io/deadline": ts(0)}, started=-2 * HOUR)
    p = pod("long-1", owner=j, started=-2 * HOUR)
    bare = pod("bare", started=-HOUR, annotations={"batchgate.io/time-limit": "1h"})
    result = plan(of(j, p, bare), T0, Settings())
    assert sorted(a.target.name for a in result.actions if a.kind == "stop") == ["bare", "long"]
    runs = {r.uid: r for r in result.runs}
    assert (runs["uid-long"].key, runs["uid-long"].seconds, runs["uid-long"].censored) == (
        ("demo", "batch", "sim:1"), 2 * HOUR, True)
    assert (runs[pod_view(bare).ref.uid].key, runs[pod_view(bare).ref.uid].seconds) == (("demo", "batch", "busybox"), HOUR)
    assert plan(of(j, p), T0 - 60, Settings()).runs == ()  # not yet due: no run


def test_a_program_that_ran_into_its_limit_is_predicted_to_run_to_it() -> None:
    """The next run of a program whose last run was stopped at its limit holds its node to the
    limit, not to the shorter runs before it alone."""
    h = remember({}, [Run(key_of("demo", "batch", "busybox"), "a", T0 - 5 * HOUR, T0 - 4 * HOUR - 40 * MIN),
                      Run(key_of("demo", "batch", "busybox"), "b", T0 - 4 * HOUR, T0 - 2 * HOUR, censored=True)])
    assert Predictor.of(h).predict(key_of("demo", "batch", "busybox"), 2 * HOUR) == (20 * MIN + 2 * HOUR) / 2
    h = remember(h, [Run(key_of("demo", "batch", "busybox"), "c", T0 - 2 * HOUR, T0, censored=True)])
    assert Predictor.of(h).predict(key_of("demo", "batch", "busybox"), 2 * HOUR) == 2 * HOUR


def test_the_controller_remembers_a_job_it_stopped_at_its_deadline_after_it_is_gone() -> None:
    api = FakeApi()
    api.put(pod("first", started=-2 * HOUR, annotations={"batchgate.io/time-limit": "1h"}))
    c = Controller(api, Settings(leader_elect=False), clock=lambda: T0)
    c.cache.list_once()
    outcomes = c.run_pass("resync")
    assert [(o.action.kind, o.result) for o in outcomes] == [("stop", "done")]
    assert c.history == {("demo", "batch", "busybox"): ((T0 - HOUR, pod_view(pod("first")).ref.uid, HOUR),)}


# -- the user's own expected runtime (batchgate.io/expected-runtime) ------------------------------
def test_the_users_expected_runtime_wins_over_history_and_never_passes_the_limit() -> None:
    own = {"batchgate.io/expected-runtime": "10m"}
    r = with_spec(pod("r1", node="n1", started=-5 * MIN, annotations={"batchgate.io/time-limit": "2h", **own}),
                  cpu="4")
    s = snap(r, waiting("w1", cpu="4", limit="2h"), nodes=[node("n1")])
    assert starts(s, history(HOUR)) == {"w1": 5 * MIN}  # its own 10 minutes, not the hour earlier runs took
    assert starts(s, None) == {"w1": 115 * MIN}  # without predictions: to the limit, as squeue --start
    # outlived: as a prediction that proved wrong, halfway from now to its deadline
    r = with_spec(pod("r1", node="n1", started=-HOUR, annotations={"batchgate.io/time-limit": "2h", **own}), cpu="4")
    assert starts(snap(r, waiting("w1", cpu="4"), nodes=[node("n1")]), history(HOUR)) == {"w1": 30 * MIN}
    # pending: it holds its node for its own estimate, capped at its limit
    first = waiting("first", cpu="4", limit="1h", created=-HOUR)
    first["metadata"]["annotations"]["batchgate.io/expected-runtime"] = "20m"
    s = snap(first, waiting("second", cpu="4"), nodes=[node("n1")])
    assert starts(s, history(HOUR)) == {"first": 0, "second": 20 * MIN}
    first["metadata"]["annotations"]["batchgate.io/expected-runtime"] = "5h"  # slipped past the webhook
    assert starts(snap(first, waiting("second", cpu="4"), nodes=[node("n1")]), history(10 * MIN))["second"] == HOUR


def test_a_jobs_expected_runtime_is_its_own_annotation_else_its_templates_and_malformed_is_none() -> None:
    j = a_job("a", annotations={"batchgate.io/expected-runtime": "15m"})
    assert job_view(j).expected_runtime == 15 * MIN
    j = a_job("b")
    j["spec"]["template"]["metadata"].setdefault("annotations", {})["batchgate.io/expected-runtime"] = "1h30m"
    assert job_view(j).expected_runtime == 90 * MIN
    assert job_view(a_job("c", annotations={"batchgate.io/expected-runtime": "soon"})).expected_runtime is None
    p = pod("p", annotations={"batchgate.io/time-limit": "1h", "batchgate.io/expected-runtime": "5m"})
    assert pod_view(p).expected_runtime == 5 * MIN
