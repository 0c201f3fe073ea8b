"""The loop's passes over an in-memory API: idempotence (zero writes on a steady cluster), dry run."""

from __future__ import annotations

import io
import threading
import time

from fakeapi import FakeApi
from reconbuild import HOUR, T0, deadline_ann, group_labels, job, pod, terminated

from webhook.reconciler.controller import Controller
from webhook.reconciler.settings import Settings
from webhook.units import format_time

SETTINGS = Settings(leader_elect=False, warning_lead=600)


def cluster(api: FakeApi) -> None:
    for i in range(20):
        api.put(pod(f"bare-{i}", started=-i, annotations=deadline_ann("2h")))
    for i in range(5):
        j = api.put(job(f"mpi-{i}", annotations=deadline_ann("4h"), template_labels=group_labels(f"mpi-{i}", 2)))
        for k in range(2):
            api.put(pod(f"mpi-{i}-{k}", owner=j, started=10 * k, labels=group_labels(f"mpi-{i}", 2)))
    j = api.put(job("broken", template_labels=group_labels("broken", 2)))
    api.put(pod("broken-0", owner=j, labels=group_labels("broken", 2)))
    api.put(pod("broken-1", owner=j, labels=group_labels("broken", 2), phase="Failed",
                containers=[terminated(1)]))


def test_first_pass_acts_then_every_resync_writes_nothing() -> None:
    api = FakeApi()
    cluster(api)
    c = Controller(api, SETTINGS, clock=lambda: T0 + 60)
    c.cache.list_once()
    outcomes = c.run_pass("resync")
    assert outcomes and all(o.result == "done" for o in outcomes)
    kinds = sorted({o.action.kind for o in outcomes})
    assert kinds == ["gang-restart", "record-deadline"]
    # The writes' responses went into the cache: the very next pass has nothing to do ...
    writes = len(api.writes())
    assert c.run_pass("change") == []
    # ... and neither do later resyncs, from a fresh list.
    for _ in range(3):
        c.cache.list_once()
        assert c.run_pass("resync") == []
    assert len(api.writes()) == writes
    assert c.actuator.writes == writes


def test_steady_cluster_zero_writes_even_across_a_warning() -> None:
    api = FakeApi()
    cluster(api)
    c = Controller(api, SETTINGS, clock=lambda: T0 + 60)
    c.cache.list_once()
    c.run_pass()
    clock = [T0 + 2 * HOUR - 300]  # bare pods' warnings fall due
    c.clock = lambda: clock[0]
    warned = c.run_pass()
    assert {o.action.kind for o in warned} == {"warn"}
    n = len(api.writes())
    c.cache.list_once()
    assert c.run_pass() == []
    assert len(api.writes()) == n


def test_pod_groups_only_with_the_crd() -> None:
    api = FakeApi(pod_group_crd=True)
    cluster(api)
    c = Controller(api, SETTINGS, clock=lambda: T0 + 60)
    c.cache.list_once()
    created = [o for o in c.run_pass() if o.action.kind == "create-podgroup"]
    assert len(created) == 6  # the broken Job's group starts over: the Job and its PodGroup stay
    c.cache.list_once()
    assert c.run_pass() == []


def test_dry_run_prints_one_line_per_action_and_writes_nothing() -> None:
    api = FakeApi()
    cluster(api)
    out = io.StringIO()
    c = Controller(api, Settings(leader_elect=True), dry_run=True, out=out, clock=lambda: T0 + 60)
    assert c.elector is None  # a dry run never takes the lease
    assert c.run_once() == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 5 + 20 + 1  # 5 Jobs + 20 bare pods recorded, 1 gang restarted
    assert any(line.startswith("gang-restart") and "Job demo/broken" in line for line in lines)
    assert api.writes() == []


def test_once_refuses_to_act_while_another_replica_leads() -> None:
    api = FakeApi()
    cluster(api)
    leader = Controller(api, Settings(identity="leader", lease_namespace="ns"), clock=lambda: T0)
    assert leader.elector is not None and leader.elector.try_once()
    other = Controller(api, Settings(identity="other", lease_namespace="ns"), clock=lambda: T0 + 60)
    assert other.run_once() == 1
    assert [w for w in api.writes() if w[1] != "leases"] == []


def test_loop_wakes_up_for_the_warning_and_the_deadline_without_any_change() -> None:
    """Nothing changes in the cluster: only the plan's wake_at can make these passes happen."""
    api = FakeApi()
    t0 = time.time()
    api.put(pod("p", started=0, annotations=deadline_ann("3s")))
    raw = api.objects[("pods", "demo", "p")]
    raw["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] = format_time(t0)
    c = Controller(api, Settings(leader_elect=False, warning_lead=1, resync_period=3600, min_pass_interval=0.05))
    runner = threading.Thread(target=c.run)
    runner.start()
    try:
        deadline = time.monotonic() + 15
        while ("pods", "demo", "p") in api.objects and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        c.stop()
        runner.join(10)
    assert ("pods", "demo", "p") not in api.objects
    assert time.time() >= int(t0) + 3  # startedAt has whole seconds
    assert sorted(e["reason"] for e in api.events()) == ["DeadlineSet", "TimeLimitApproaching", "TimeLimitExceeded"]
    assert c.passes <= 8  # a handful of passes, not a busy loop


def test_once_works_through_held_back_bookkeeping() -> None:
    api = FakeApi()
    cluster(api)
    c = Controller(api, Settings(leader_elect=False, max_bookkeeping_per_pass=4), clock=lambda: T0 + 60)
    assert c.run_once() == 0
    assert c.passes == 7  # 25 records, 4 per pass
    c.cache.list_once()
    assert c.plan_now().actions == []


def test_a_bundle_that_stops_loading_keeps_the_last_good_queue_policy_and_says_it_is_stale(tmp_path) -> None:
    import shutil

    from tests.conftest import POLICIES
    from webhook.reconciler import metrics
    from webhook.reconciler.main import policy_loader

    root = tmp_path / "policies"
    shutil.copytree(POLICIES, root)
    loader = policy_loader(str(root))
    good = loader()
    assert good is not None
    c = Controller(FakeApi(), Settings(leader_elect=False, queues=good), reload_policy=loader)
    f = root / "bundle.yaml"
    original = f.read_text()
    for old, new in (("max: 7d", "max: 2024-13-45"), ("max: 7d", "max: !days 7"),
                     ('groups: [system:masters, "batchgate:admins"]', "groups: [system:authenticated]")):
        f.write_text(original.replace(old, new, 1))
        c._reload()
        assert c.bundle_stale and c.settings.queues is good
        assert metrics.REGISTRY.get_sample_value("batchgate_reconciler_bundle_stale") == 1
    f.write_text(original.replace("max: 7d", "max: 5d"))
    c._reload()
    assert not c.bundle_stale and c.settings.queues.max_time_limit["batch"] == 5 * 86400
    assert metrics.REGISTRY.get_sample_value("batchgate_reconciler_bundle_stale") == 0


def test_the_cyclic_collector_is_off_while_a_pass_plans_and_back_on_after(monkeypatch) -> None:
    import gc

    import pytest

    from webhook.reconciler import controller

    api = FakeApi()
    cluster(api)
    c = Controller(api, SETTINGS, clock=lambda: T0 + 60)
    c.cache.list_once()
    seen: list[bool] = []
    real = controller.plan

    def planning(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(gc.isenabled())
        if len(seen) == 2:
            raise RuntimeError("a pass that fails")
        return real(*args, **kwargs)

    monkeypatch.setattr(controller, "plan", planning)
    assert gc.isenabled()
    assert c.plan_now().actions
    assert seen == [False] and gc.isenabled()
    with pytest.raises(RuntimeError):
        c.plan_now()
    assert seen == [False, False] and gc.isenabled()  # on again after a pass that raised
    gc.disable()  # someone else's choice (a benchmark's) is left as it was
    try:
        c.plan_now()
        assert seen == [False, False, False] and not gc.isenabled()
    finally:
        gc.enable()
