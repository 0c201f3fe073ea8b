"""Issue 27: what one tenant stores must cost that tenant's object, never the reconciler.

Each case is an object a user with ``edit`` in their own namespace can store (while the webhook
admitted it, or was down): the views bound what they keep and refuse what no arithmetic should
see, and the planner plans every other object as if it were not there.
"""

from __future__ import annotations

from reconbuild import HOUR, T0, deadline_ann, pod, snapshot
from test_scavenger_controller import World, sj

from webhook.reconciler.model import pod_view
from webhook.reconciler.planner import plan
from webhook.reconciler.scavenger import sj_view
from webhook.reconciler.settings import Settings

HUGE = "99999999999999999999s"  # admitted before issue 27: parse_duration had no upper bound


# -- durations: bounded in the views -------------------------------------------------------------
def test_a_scavengerjob_with_a_duration_past_the_bound_fails_alone_and_the_others_run():
    """Before: admitted, started, and once its pods ran, the status message (format_time of the
    segment's end) overflowed; plan() raised and every pass failed, for every tenant."""
    w = World(sj("huge", duration=HUGE, cpu="1"), sj("other", cpu="1"))
    w.step()  # both queued
    w.step()
    for name in w.jobs():
        w.run_job(name)
    w.step(60)
    w.step(60)
    huge, other = w.sj("huge")["status"], w.sj("other")["status"]
    assert huge["phase"] == "Failed", huge
    assert f"spec.duration: '{HUGE}' is longer than 3650d, the longest duration batchgate accepts" in huge["message"]
    assert other["phase"] == "Running", other


def test_the_scavengerjob_view_refuses_what_the_policy_refuses():
    obj = sj("big", pods=10_001, duration="30m")
    assert sj_view(obj).need is None
    assert "spec.pods: 10001 is more than 10000" in "; ".join(sj_view(obj).problems)
    obj = sj("big", cpu="100000", mem="1Ei")
    assert sj_view(obj).need is None and "the most a scavenger pod may ask for" in sj_view(obj).problems[0]
    assert sj_view(sj("ok", pods=10_000, cpu="10000", mem="1Pi", duration="3650d")).problems == ()


def test_a_bare_pod_with_a_limit_past_the_bound_does_not_stop_the_pass():
    """Before: a bare Pod (no record: made with a custom-resource owner, which it then dropped)
    relabelled to an unknown queue with this limit overflowed the deadline computation."""
    hostile = pod("hostile", labels={"batchgate.io/queue": "no-such-queue"}, admitted=None,
                  annotations={"batchgate.io/time-limit": HUGE})
    late = pod("late", annotations=deadline_ann("1h"))
    assert pod_view(hostile).limit is None  # not a limit batchgate accepts: as malformed
    result = plan(snapshot(hostile, late), T0 + 2 * HOUR, Settings())
    assert [(a.kind, a.target.name) for a in result.actions] == [("stop", "late")]
