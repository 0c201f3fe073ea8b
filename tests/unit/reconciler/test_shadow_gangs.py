"""The shadow schedule's gang placement (``shadow._place_gang``, through the index of earliest
starts' ``fit``) answers as the straightforward placement does: at each candidate time, ask every
node in the candidates' order, pod by pod, reserving each pod tentatively so the next one sees it.
Seeded random nodes (capacities, reservations with and without an end, maintenance windows) and
random gangs of a few pod sizes with a few limits each, single pods between them; then whole
snapshots with queued Jobs, gated gangs, selectors, taints and tolerations, several limits and
windows, placed by ``shadow_schedule`` with either placement. The straightforward placement asks
each node with the sweep over its steps (``test_shadow.by_sweep``), not with ``_Node.earliest``."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.reconciler.reconbuild import HOUR, T0, ts
from tests.unit.reconciler.test_queue import POLICY, gated, queued_job
from tests.unit.reconciler.test_shadow import by_sweep, node, running, snap
from webhook.reconciler import queue, shadow
from webhook.reconciler.model import Snapshot
from webhook.reconciler.planner import effective_limit
from webhook.reconciler.settings import Settings
from webhook.windows import parse_window

INF = float("inf")


def by_scan(work: Any, index: Any, now: float, duration: float, margin: float,
            est: Callable[..., Any], hold: float, reserve_later: bool = True) -> Any:
    """The straightforward placement (the shadow schedule's before the index learnt ``fit``); no
    EASY queue here, so everything placed is reserved."""
    assert reserve_later
    s = work.sched
    size = work.size or len(work.pods)
    nodes = index.nodes
    soonest = list(index.all_times())
    t0 = now
    for _ in range(50):
        if t0 == now:
            firsts = sorted({t for t in soonest if t is not None})
        else:
            firsts = sorted({t for n in nodes
                             if (t := by_sweep(n, t0, duration, s.cpu, s.mem, margin, INF, hold)) is not None})
        if not firsts:
            break
        log = index.log
        for t in firsts:
            placed: list[Any] = []
            mark = len(log)
            for n, first in zip(nodes, soonest, strict=True):
                if first is None or first > t:
                    continue
                while len(placed) < size and by_sweep(n, t, duration, s.cpu, s.mem, margin, t + 1, hold) == t:
                    n.reserve(t, t + duration, s.cpu, s.mem, tentative=True)
                    placed.append(n)
                if len(placed) == size:
                    break
            if len(placed) == size:
                for n in placed:
                    n.keep()
                if t <= now:  # where it starts: the nodes the release is narrowed to
                    return est(t, "fits now, all pods together", nodes=tuple(sorted({n.name for n in placed})))
                return est(t, f"all {size} pods of the group fit together then")
            for n in reversed(placed):
                n.unreserve()
            del log[mark:]
        later = [c for n in nodes if (c := shadow._next_freed(n, firsts[-1])) is not None]  # room grows next
        if not later:
            break
        t0 = min(later)
    return est(None, f"its {size} pods (one group) never fit together on the nodes they may use"
               if duration < INF else "waits for work without a time limit")


def _cluster(seed: int) -> tuple[list[Any], list[Any]]:
    rng = random.Random(seed)
    log: list[Any] = []
    nodes = []
    for i in range(rng.randint(1, 16)):
        blocked = sorted((s, s + rng.choice((600.0, 3600.0, INF))) for s in
                         (T0 + rng.choice((0.0, 1800.0, rng.uniform(0, 8 * HOUR))) for _ in range(rng.choice((0, 0, 1, 2)))))
        n = shadow._Node(f"n{i}", rng.choice((4000, 8000, 16000)), rng.choice((2**33, 2**34)), {}, (), blocked)
        for _ in range(rng.randint(0, 8)):
            start = T0 + rng.choice((0.0, 0.0, 1800.0, 3600.0, rng.uniform(0, 4 * HOUR)))
            n.reserve(start, start + rng.choice((600.0, 1800.0, 3600.0, 2 * 3600.0, INF)),
                      rng.choice((500, 1000, 2000, 4000)), rng.choice((2**30, 2**31)))
        n.log = log
        nodes.append(n)
    return nodes, log


class _Work:
    def __init__(self, cpu: int, mem: int, size: int) -> None:
        self.sched = type("S", (), {"cpu": cpu, "mem": mem})()
        self.size, self.pods = size, []


@pytest.mark.parametrize("seed", range(100))
def test_a_gang_is_placed_where_asking_every_node_pod_by_pod_places_it(seed: int) -> None:
    rng = random.Random(seed)
    (fast, fast_log), (slow, slow_log) = _cluster(seed), _cluster(seed)
    # a few pod sizes, each with a few limits (the shapes of one size share what their nodes know: ``_Node.free``)
    sizes = [(rng.choice((0, 500, 1000, 2000, 3000)), rng.choice((0, 2**29, 2**30, 2**32))) for _ in range(2)]
    shapes = [(cpu, mem, rng.choice((0.0, 1800.0, 3600.0, 3 * 3600.0, INF)), rng.choice((None, 0.0, 3600.0, 4 * 3600.0)))
              for cpu, mem in sizes for _ in range(3)]
    indexes: dict[Any, tuple[Any, Any]] = {}
    est = lambda start, reason, never=False, nodes=(): (start, reason, never, nodes)  # noqa: E731
    for _ in range(40):
        cpu, mem, duration, hold = shape = rng.choice(shapes)
        hold = duration if hold is None else hold
        if shape not in indexes:
            indexes[shape] = tuple(shadow._Earliest(nodes, log, T0, duration, cpu, mem, 300.0, hold)
                                   for nodes, log in ((fast, fast_log), (slow, slow_log)))
        fi, si = indexes[shape]
        size = rng.choice((1, 2, 3, 5, 8, 20))
        if rng.random() < 0.3:  # a single pod between the gangs, placed by the heap
            got, want = fi.best(), si.best()
            assert (got and (got[0], got[1].name)) == (want and (want[0], want[1].name))
            if got is not None:
                got[1].reserve(got[0], got[0] + duration, cpu, mem)
                want[1].reserve(want[0], want[0] + duration, cpu, mem)
            continue
        work = _Work(cpu, mem, size)
        assert (shadow._place_gang(work, fi, T0, duration, 300.0, est, hold)  # type: ignore[arg-type]
                == by_scan(work, si, T0, duration, 300.0, est, hold))
        assert [n.steps() for n in fast] == [n.steps() for n in slow]
        assert fi.all_times() == si.all_times()


def _snapshot(seed: int) -> tuple[Snapshot, list[Any]]:
    rng = random.Random(seed)
    taint = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
    nodes = [node(f"n{i}", cpu=rng.choice(("4", "8", "16")), labels={"rack": f"r{i % 3}"},
                  taints=[taint] if rng.random() < 0.25 else None) for i in range(rng.randint(1, 12))]
    tolerate = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    objs: list[dict[str, Any]] = []
    for i in range(rng.randint(0, 20)):
        objs.append(running(f"run{i}", f"n{rng.randrange(len(nodes))}", limit=rng.choice(("30m", "1h", "3h", None)),
                            cpu=rng.choice(("1", "2", "4")), started=-rng.uniform(0, HOUR)))
    for i in range(rng.randint(1, 40)):
        created = -rng.uniform(0, 5 * HOUR)
        limit = rng.choice(("30m", "1h", "2h", "3h", "5h", "8h"))
        kind = rng.random()
        if kind < 0.35:
            objs.append(queued_job(f"j{i}", pods=rng.randint(1, 6), cpu=rng.choice(("1", "2", "3")), created=created,
                                   limit=limit))
        elif kind < 0.7:
            size = rng.randint(2, 8)
            cpu = rng.choice(("1", "2", "4"))
            for k in range(size):
                p = gated(f"g{i}-{k}", cpu=cpu, created=created, limit=limit,
                          labels={"batchgate.io/pod-group": f"g{i}", "batchgate.io/pod-group-size": str(size)})
                if rng.random() < 0.2:
                    p["spec"]["nodeSelector"] = {"rack": "r1"}
                if (k == 0 and rng.random() < 0.3) or (k and objs[-1]["spec"].get("tolerations")):
                    p["spec"]["tolerations"] = tolerate  # the whole group's
                objs.append(p)
        else:
            p = gated(f"p{i}", cpu=rng.choice(("1", "2", "8")), created=created, limit=limit)
            if rng.random() < 0.3:
                p["spec"]["tolerations"] = tolerate
            objs.append(p)
    windows = []
    for k in range(rng.choice((0, 0, 1, 2))):
        start = rng.choice((-1800, 0, 1800, rng.uniform(-HOUR, 4 * HOUR)))
        w, _ = parse_window({"metadata": {"name": f"w{k}"}, "spec": {
            "start": ts(start), "end": ts(start + rng.choice((1800, 7200))), "nodeSelector": {"matchLabels": {"rack": f"r{k}"}}}})
        assert w is not None
        windows.append(w)
    return snap(*objs, nodes=nodes), windows


def _placed(s: Snapshot, windows: list[Any]) -> list[Any]:
    settings = Settings(queues=POLICY)
    limit_of = lambda o: effective_limit(o, settings)  # noqa: E731
    waiting = queue.waiting(s, T0, POLICY, {}, limit_of)
    return shadow.shadow_schedule(s, T0, windows, limit_of=limit_of, queued=queue.as_queued(waiting, POLICY),
                                  preempts_below=queue.preempts_below(POLICY), class_values=POLICY.class_values,
                                  released=queue.released(POLICY))


@pytest.mark.parametrize("seed", range(80))
def test_the_queues_placement_is_the_same_with_the_straightforward_gang_placement(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    s, windows = _snapshot(seed)
    fast = _placed(s, windows)
    monkeypatch.setattr(shadow, "_place_gang", by_scan)
    assert fast == _placed(s, windows)
    assert any(e.queued for e in fast)
