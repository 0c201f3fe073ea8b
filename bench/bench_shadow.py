"""Benchmark: maintenance windows and expected start times.

    python bench/bench_shadow.py [--passes 20] [--seed 1] [--seeds 5] [--scenarios repeat:1.5,...]
                                 [--outlived stepwise]

Two figures:

1. **Planning pass** with 10,000 pods and 20 maintenance windows: 250 nodes (64 CPU,
   256 GiB) in 25 racks, a window per rack for 20 of them (1 h to 40 h ahead, 4 h long),
   9,000 running pods with time limits and recorded deadlines spread over the next day,
   1,000 pending pods (priorities 0 / 1000 / 10000; a quarter of them in 4-pod gang
   Jobs). CPU time of ``plan()`` (deadlines, gangs, countdowns, drains, the shadow
   schedule and the estimates), best / median / p90, and of the shadow schedule alone.

2. **Accuracy of the estimates**: generated days of arrivals (Poisson, at the rate that offers a given load) replayed on 20 nodes of
   64 CPU with one 2-hour maintenance window on 4 of them. A greedy list scheduler, like
   kube-scheduler (at each arrival or completion, the pending jobs in priority-then-age order,
   each placed now if it fits, keeping long jobs off nodes whose window they would run into),
   gives the true start times; at each arrival the shadow schedule is asked for that job's
   estimate, from the state at that moment: ``limits``, every job running to its limit (as
   Slurm's ``squeue --start``); ``predicted``, runtimes predicted from the runs seen so far (those
   that ended well and those stopped at their limit; runtimes.py, as the reconciler does);
   ``distribution``, the median runtime of each program known exactly (``Predictor.likely``, the
   geometric mean, over 200 runs drawn from its own
   distribution: the best any predictor that learns per program can know, with nothing about
   the run at hand); ``exact``, each job's exact runtime. ``arrivals`` is the start the same
   scheduler would have given the job had nothing arrived after it: its error is what later
   arrivals (with higher priority, or fitting sooner) change, which no estimate made at arrival
   can know. The error of a job that waited is |estimate - true start| / true wait; median and
   p90 over those jobs, per seed; then each estimate against ``arrivals`` instead of the true
   start (its error with later arrivals out of the picture).

   Workload models (``--scenarios model:load,...``, load: the CPU-time offered as a share of the cluster; see ``workload``): ``repeat``, 30 users
   with weights 1/rank, each running 1-3 programs (a size 1-32 CPU, a limit 15 m-8 h, a typical
   share of the limit uniform in 5-100 %), 80 % of a user's jobs the program they ran last;
   per run, 10 % stopped at the limit, 10 % failing in the first 5 % of it, the rest lognormal
   around the program's share (``--sigma``, 0.5); ``iid``, each runtime 50-100 % of the limit
   afresh, so history carries nothing. A third of jobs are high priority. The shapes follow
   published workload-archive observations (runtimes spread below the limit with spikes at
   both ends, Mu'alem and Feitelson 2001; few round limits and repeated jobs, Tsafrir, Etsion
   and Feitelson 2005/2007); the numbers are assumptions, not fitted to a log.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from webhook.reconciler.model import (
    NodeView,
    Snapshot,
    job_view,
    node_view,
    pod_view,
    window_view,
)
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import Settings
from webhook.reconciler.shadow import shadow_schedule
from webhook.units import format_time

NOW = 1_764_000_000.0
HOUR = 3600.0


def node(name: str, cpu: int, rack: str) -> NodeView:
    return node_view({"metadata": {"name": name, "uid": f"uid-{name}", "labels": {"rack": rack}},
                      "status": {"allocatable": {"cpu": str(cpu), "memory": "256Gi"},
                                 "conditions": [{"type": "Ready", "status": "True"}]}})


def pod(name: str, *, cpu: int, limit: float, node_name: str = "", started: float | None = None,
        priority: int = 0, created: float = NOW, owner: dict[str, Any] | None = None,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    ann = {"batchgate.io/time-limit": f"{int(limit // 60)}m"}
    if started is not None and owner is None:
        ann["batchgate.io/started-at"] = format_time(started)
        ann["batchgate.io/deadline"] = format_time(started + limit // 60 * 60)
    md: dict[str, Any] = {"name": name, "namespace": "bench", "uid": f"uid-{name}", "resourceVersion": "1",
                          "creationTimestamp": format_time(created), "annotations": ann, "labels": labels or {}}
    if owner is not None:
        md["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"],
                                  "uid": owner["metadata"]["uid"], "controller": True}]
    status: dict[str, Any] = {"phase": "Pending"}
    if started is not None:
        status = {"phase": "Running", "startTime": format_time(started),
                  "containerStatuses": [{"name": "m", "state": {"running": {"startedAt": format_time(started)}}}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md,
            "spec": {"nodeName": node_name, "priority": priority,
                     "containers": [{"name": "m", "resources": {"requests": {"cpu": str(cpu), "memory": "1Gi"}}}]},
            "status": status}


def window(name: str, start: float, end: float, rack: str | None = None, nodes: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"start": format_time(start), "end": format_time(end)}
    if rack:
        spec["nodeSelector"] = {"matchLabels": {"rack": rack}}
    if nodes:
        spec["nodes"] = nodes
    return {"apiVersion": "batchgate.io/v1alpha1", "kind": "MaintenanceWindow",
            "metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}


# -- 1. the planning pass ------------------------------------------------------------------
def big_cluster(rng: random.Random) -> Snapshot:
    nodes = [node(f"n{i}", 64, f"r{i % 25}") for i in range(250)]
    pods: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    for i in range(9000):
        limit = rng.choice((2, 4, 8, 24)) * HOUR
        pods.append(pod(f"run-{i}", cpu=1, limit=limit, node_name=f"n{i % 250}",
                        started=NOW - rng.uniform(0, limit * 0.9)))
    i = 0
    while i < 1000:
        prio = rng.choice((0, 1000, 1000, 10000))
        created = NOW - rng.uniform(0, 6 * HOUR)
        if i % 4 == 0 and i + 4 <= 1000 and rng.random() < 0.25:
            j = {"apiVersion": "batch/v1", "kind": "Job",
                 "metadata": {"name": f"gang-{i}", "namespace": "bench", "uid": f"uid-gang-{i}", "resourceVersion": "1",
                              "annotations": {"batchgate.io/time-limit": "4h"}}}
            jobs.append(j)
            for k in range(4):
                pods.append(pod(f"gang-{i}-{k}", cpu=16, limit=4 * HOUR, priority=prio, created=created, owner=j,
                                labels={"batchgate.io/pod-group": f"gang-{i}", "batchgate.io/pod-group-size": "4"}))
            i += 4
            continue
        pods.append(pod(f"wait-{i}", cpu=rng.choice((2, 4, 8, 16)), limit=rng.choice((1, 2, 4, 8)) * HOUR,
                        priority=prio, created=created))
        i += 1
    windows = [window(f"w{r}", NOW + (1 + 2 * r) * HOUR, NOW + (5 + 2 * r) * HOUR, rack=f"r{r}") for r in range(20)]
    return Snapshot.of(pods=[pod_view(p) for p in pods], jobs=[job_view(j) for j in jobs], nodes=nodes,
                       windows=[window_view(w) for w in windows])


def settle(snap: Snapshot, actions: list[Any]) -> Snapshot:
    """The snapshot once a pass's labels and annotations are written (the steady state)."""
    pods, jobs, nodes = dict(snap.pods), dict(snap.jobs), dict(snap.nodes or {})
    fields = {"batchgate.io/next-maintenance": "next_maintenance", "batchgate.io/expected-start": "expected_start"}
    for a in actions:
        t = a.target
        if t.kind == "Node" and a.patch and "labels" in a.patch.get("metadata", {}):
            n = nodes[t.name]
            nodes[t.name] = dataclasses.replace(n, labels={**n.labels, **a.patch["metadata"]["labels"]})
        for key, value in (a.annotations or {}).items():
            if key in fields:
                store = pods if t.kind == "Pod" else jobs
                obj = store[(t.namespace, t.name)]
                store[(t.namespace, t.name)] = dataclasses.replace(obj, **{fields[key]: value})  # type: ignore[type-var]
    return dataclasses.replace(snap, pods=pods, jobs=jobs, nodes=nodes)


def cpu_ms(fn: Any, passes: int) -> tuple[float, float, float]:
    times = []
    for _ in range(passes):
        t = time.process_time()
        fn()
        times.append((time.process_time() - t) * 1000)
    times.sort()
    return times[0], statistics.median(times), times[max(int(len(times) * 0.9) - 1, 0)]


# -- 2. the replay ---------------------------------------------------------------------------
LIMITS = (15, 30, 60, 120, 240, 480)  # minutes: the round values users pick as limits
SIZES = (1, 2, 4, 8, 16, 32)  # CPUs per job (one pod)
SIGMA = 0.5  # spread of one program's runtimes around its typical one (lognormal sigma)


@dataclasses.dataclass(slots=True)
class Job:
    id: int
    user: str
    program: str
    arrive: float
    cpu: int
    limit: float
    runtime: float
    ends_well: bool  # Complete: not failed, not stopped at its limit
    prio: int
    share: float = 1.0  # its program's typical runtime, as a share of the limit
    start: float | None = None
    node: str | None = None
    estimates: dict[str, float | None] = dataclasses.field(default_factory=dict)


def workload(rng: random.Random, *, model: str, hours: float, load: float, capacity: int, sigma: float) -> list[Job]:
    """A day of arrivals offering ``load`` (a share of ``capacity``, in CPU-seconds per second).
    ``model`` "repeat": users run the same programs again and again (each program: a size, a limit,
    a typical share of the limit, and runs that scatter around it); "iid": every job's runtime is
    drawn afresh (50-100 % of its limit), so history says nothing."""
    users = [f"u{i}" for i in range(30)]
    weights = [1 / (i + 1) for i in range(len(users))]  # a few users submit most jobs
    programs: dict[str, list[tuple[str, int, float, float]]] = {}
    for u in users:
        programs[u] = [(f"{u}/app{k}:1", rng.choice(SIZES), rng.choice(LIMITS) * 60.0, rng.uniform(0.05, 1.0))
                       for k in range(rng.randint(1, 3))]
    last: dict[str, int] = {}

    def draw(r: random.Random) -> tuple[str, str, int, float, float, bool, int]:
        user = r.choices(users, weights)[0]
        mine = programs[user]
        k = last.get(user, 0) if r.random() < 0.8 else r.randrange(len(mine))  # mostly what they ran last
        last[user] = k
        program, cpu, limit, share = mine[k]
        fate = r.random()
        if model == "iid":
            runtime, ends_well = limit * r.uniform(0.5, 1.0), True
        elif fate < 0.10:  # runs into its limit and is stopped there
            runtime, ends_well = limit, False
        elif fate < 0.20:  # fails early
            runtime, ends_well = limit * r.uniform(0.0, 0.05), False
        else:
            runtime = min(limit * share * r.lognormvariate(0.0, sigma), limit)
            ends_well = runtime < limit
        return user, program, cpu, limit, max(runtime, 1.0), ends_well, 1000 if r.random() < 1 / 3 else 0, share

    # The arrival rate that offers ``load``: from the mean work of a job, on a pilot sample.
    pilot = random.Random(rng.random())
    work = statistics.mean(d[2] * d[4] for d in (draw(pilot) for _ in range(5000)))
    last.clear()
    rate = load * capacity / work  # jobs per second
    jobs: list[Job] = []
    t = NOW
    while True:
        t += rng.expovariate(rate)
        if t >= NOW + hours * HOUR:
            return jobs
        user, program, cpu, limit, runtime, ends_well, prio, share = draw(rng)
        jobs.append(Job(len(jobs), user, program, t, cpu, limit, runtime, ends_well, prio, share=share))


# The predictors compared: "predicted" learns from the runs that ended so far, as the reconciler
# does; "distribution" knows, from the start, 200 runs of each program drawn as the model draws
# them (what a predictor that had watched every program for ever would know; no per-run knowledge).
PREDICTORS: dict[str, dict[str, Any]] = {"predicted": {}, "distribution": {}}
# Users who say how long their job runs (batchgate.io/expected-runtime), off from the truth by a
# lognormal factor of this spread (0.1: about 10 %), capped at the limit as the webhook requires.
OWN_SPREADS = (0.1, 0.3)


def replay(rng: random.Random, *, model: str = "repeat", hours: float = 24, load: float = 0.6,
           sigma: float = SIGMA, n_nodes: int = 20, node_cpu: int = 64, margin: float = 300.0) -> dict[str, Any]:
    """Replay a day; the estimate each waiting job got on arrival, with and without predictions,
    against its true start, and against the start it would have had had no job arrived after it
    (``alone``: what is left once later arrivals are out of the picture). Returns the errors
    (share of the wait) per variant and the load."""
    import heapq

    from webhook.reconciler.runtimes import Predictor, Run, key_of, remember

    nodes = [node(f"n{i}", node_cpu, "a" if i < 4 else "b") for i in range(n_nodes)]
    mw_view = window_view(window("mw", NOW + 10 * HOUR, NOW + 12 * HOUR, rack="a"))
    assert mw_view.window is not None
    win = mw_view.window
    jobs = workload(rng, model=model, hours=hours, load=load, capacity=n_nodes * node_cpu, sigma=sigma)
    free = {n.name: node_cpu for n in nodes}
    running: list[Job] = []
    pending: list[Job] = []
    history: dict[Any, Any] = {}
    events = [(j.arrive, 0, j.id) for j in jobs]
    heapq.heapify(events)

    def fits_window(n: str, at: float, limit: float) -> bool:
        return not (win.covers(n, {"rack": "a" if int(n[1:]) < 4 else "b"}) and win.start < at + limit + margin
                    and at < win.end)

    def greedy(at: float, queue: list[Job], room: dict[str, int]) -> list[tuple[Job, str]]:
        """kube-scheduler at ``at``: the pending jobs in priority-then-age order, each started now
        where it fits (the node with the most room); ``queue`` and ``room`` are updated."""
        started: list[tuple[Job, str]] = []
        queue.sort(key=lambda j: (-j.prio, j.arrive))
        for j in list(queue):
            for n in sorted(room, key=lambda x: -room[x]):
                if room[n] >= j.cpu and fits_window(n, at, j.limit):
                    room[n] -= j.cpu
                    queue.remove(j)
                    started.append((j, n))
                    break
        return started

    def schedule(at: float) -> None:
        for j, n in greedy(at, pending, free):
            j.start, j.node = at, n
            running.append(j)
            heapq.heappush(events, (at + j.runtime, 1, j.id))

    def alone(target: Job, at: float) -> float | None:
        """When ``target`` would start if nothing arrived after it: the same scheduler, run on."""
        room, queue = dict(free), list(pending)
        ends = [(x.start + x.runtime, x.id, x.node, x.cpu) for x in running if x.start is not None and x.node]
        heapq.heapify(ends)
        while ends:
            t, _, n, c = heapq.heappop(ends)
            room[n] += c
            for x, n2 in greedy(t, queue, room):
                if x is target:
                    return t
                heapq.heappush(ends, (t + x.runtime, x.id, n2, x.cpu))
        return None

    def as_pod(j: Job) -> dict[str, Any]:
        p = pod(f"j{j.id}", cpu=j.cpu, limit=j.limit, node_name=j.node or "", started=j.start, priority=j.prio,
                created=j.arrive)
        p["metadata"]["namespace"] = j.user
        p["spec"]["containers"][0]["image"] = j.program
        return p

    views: dict[tuple[int, str], Any] = {}  # (job, its node or "") -> its pod as the reconciler sees it

    def view(j: Job, oracle: bool, own: float | None = None) -> Any:
        key = (j.id, (j.node or "") + ("/oracle" if oracle else "") + (f"/own{own}" if own is not None else ""))
        v = views.get(key)
        if v is None:
            p = as_pod(j)
            if oracle:  # a program of its own, whose one earlier run took exactly as long as this one will
                p["spec"]["containers"][0]["image"] = f"oracle/j{j.id}"
            if own is not None:  # the user's own estimate, off by a factor drawn once per job
                guess = j.runtime * random.Random(j.id * 7919 + int(own * 1000)).lognormvariate(0.0, own)
                p["metadata"]["annotations"]["batchgate.io/expected-runtime"] = f"{max(int(min(guess, j.limit)), 1)}s"
            v = views[key] = pod_view(p)
        return v

    def program_runs(j: Job, r: random.Random, n: int = 200) -> tuple[tuple[float, str, float], ...]:
        """``n`` runs drawn from the program's own runtime distribution (as the model draws them; the
        failures the reconciler never learns from left out): what a predictor that had seen the
        program run for ever would know."""
        out = []
        for k in range(n):
            if model == "iid":
                x = j.limit * r.uniform(0.5, 1.0)
            elif r.random() < 0.10 / 0.90:
                x = j.limit
            else:
                x = min(j.limit * j.share * r.lognormvariate(0.0, sigma), j.limit)
            out.append((float(k), f"d{k}", max(x, 1.0)))
        return tuple(out)

    dist_rng = random.Random(1)
    dist_history = {key_of(u, None, prog): program_runs(j, dist_rng)
                    for (u, prog), j in {(j.user, j.program): j for j in jobs}.items()} if "distribution" in PREDICTORS else {}

    busy = 0.0
    while events:
        at, kind, jid = heapq.heappop(events)
        j = jobs[jid]
        if kind == 1:
            running.remove(j)
            assert j.node is not None and j.start is not None
            free[j.node] += j.cpu
            busy += j.cpu * max(min(at, NOW + hours * HOUR) - j.start, 0.0)  # within the day
            # A Complete Job, or one the reconciler stopped at its limit (a censored run): what it learns from.
            if j.ends_well or j.runtime >= j.limit:
                history = remember(history, [Run(key_of(j.user, None, j.program), f"j{jid}", j.start, at)])
            schedule(at)
            continue
        pending.append(j)
        schedule(at)
        if j in pending:  # it waits: what does the shadow schedule say?
            j.estimates["arrivals"] = alone(j, at)  # its error: what later arrivals alone change
            snap = Snapshot.of(pods=[view(x, False) for x in running + pending], nodes=nodes, windows=[mw_view])
            exact = Snapshot.of(pods=[view(x, True) for x in running + pending], nodes=nodes, windows=[mw_view])
            truth = Predictor.of({key_of(x.user, None, f"oracle/j{x.id}"): ((0.0, "", x.runtime),)
                                  for x in running + pending})
            variants: list[tuple[str, Snapshot, Any]] = [("limits", snap, None)]
            for name, opts in PREDICTORS.items():
                variants.append((name, snap, Predictor.of(dist_history if name == "distribution" else history, **opts)))
            for spread in OWN_SPREADS:
                own = Snapshot.of(pods=[view(x, False, spread) for x in running + pending], nodes=nodes,
                                  windows=[mw_view])
                variants.append((f"own~{spread:g}", own, Predictor.of(history)))
            variants.append(("exact", exact, truth))
            for variant, sn, predictor in variants:
                est = {e.workload.name: e.start for e in shadow_schedule(sn, at, [win], margin=margin,
                                                                          runtimes=predictor)}
                j.estimates[variant] = est.get(f"j{jid}")
    errors: dict[str, list[float]] = {"limits": [], **{k: [] for k in PREDICTORS},
                                      **{f"own~{s:g}": [] for s in OWN_SPREADS}, "exact": []}
    apart: dict[str, list[float]] = {k: [] for k in errors}  # each estimate against ``alone``
    early: dict[str, list[bool]] = {k: [] for k in errors}  # whether it said sooner than the truth
    for j in jobs:
        if j.start is None or j.start <= j.arrive:
            continue
        wait = j.start - j.arrive
        solo = j.estimates.get("arrivals")
        for variant, e in j.estimates.items():
            if e is None:
                continue
            errors.setdefault(variant, []).append(abs(e - j.start) / wait)
            early.setdefault(variant, []).append(e < j.start)
            if variant != "arrivals" and solo is not None:
                apart[variant].append(abs(e - solo) / wait)
    return {"errors": errors, "apart": apart, "early": early, "jobs": len(jobs),
            "utilisation": busy / (hours * HOUR * n_nodes * node_cpu),
            "waited": sum(1 for j in jobs if j.start is not None and j.start > j.arrive),
            "median_wait": statistics.median([j.start - j.arrive for j in jobs
                                              if j.start is not None and j.start > j.arrive] or [0.0])}


def quantiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    if not xs:
        return float("nan"), float("nan")
    return statistics.median(xs), xs[max(int(len(xs) * 0.9) - 1, 0)]


STEPS = (60, 300, 900, 1800, 3600, 7200, 18000, 36000)  # seconds: 1, 5, 15 min, 30 min, 1, 2, 5, 10 h


def stepwise(predicted: float, elapsed: float, limit: float) -> float:
    """Diagnostic (``--outlived stepwise``): Tsafrir, Etsion and Feitelson's correction of an
    outlived prediction, raised by the first of 1, 5, 15 minutes, ... that still lies ahead, in
    place of ``runtimes.corrected``'s middle of what is left before the limit."""
    if predicted > elapsed:
        return predicted
    end = max(limit, elapsed)
    return next((min(predicted + s, end) for s in STEPS if predicted + s > elapsed), end)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skip-replay", action="store_true")
    ap.add_argument("--sigma", type=float, default=SIGMA,
                    help="spread of one program's runtimes around its typical one (lognormal sigma; repeat model)")
    ap.add_argument("--seeds", type=int, default=5, help="replays per scenario (seeds from --seed on)")
    ap.add_argument("--scenarios", default="repeat:0.6,repeat:0.8,iid:0.6,iid:0.8",
                    help="workload model (repeat, iid) : offered load (share of the CPUs), comma-separated")
    ap.add_argument("--outlived", choices=("halfway", "stepwise"), default="halfway",
                    help="a running job that outlived its prediction ends halfway to its limit (as the "
                         "reconciler does), or Tsafrir et al.'s stepwise raise (diagnostic)")
    args = ap.parse_args()
    if args.outlived == "stepwise":
        import webhook.reconciler.shadow as shadow_module

        shadow_module.corrected = stepwise  # type: ignore[assignment]
    rng = random.Random(args.seed)
    snap = big_cluster(rng)
    settings = Settings()
    windows = [w.window for w in (snap.windows or {}).values() if w.window is not None]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; Python {sys.version.split()[0]}")
    snap = settle(snap, plan(snap, NOW, settings).actions)  # what a first pass records, recorded
    whole = cpu_ms(lambda: plan(snap, NOW, settings), args.passes)
    shadow = cpu_ms(lambda: shadow_schedule(snap, NOW, windows), args.passes)
    without = cpu_ms(lambda: plan(snap, NOW, Settings(expected_start=False)), args.passes)
    n_est = len(shadow_schedule(snap, NOW, windows))
    print("10,000 pods (9,000 running, 1,000 pending), 250 nodes, 20 windows, steady (recorded); "
          "ms of CPU: best / median / p90")
    print(f"  plan(), with the shadow schedule:    {whole[0]:7.1f} / {whole[1]:7.1f} / {whole[2]:7.1f}")
    print(f"  plan(), without (estimates off):     {without[0]:7.1f} / {without[1]:7.1f} / {without[2]:7.1f}")
    print(f"  shadow schedule alone ({n_est} workloads): {shadow[0]:7.1f} / {shadow[1]:7.1f} / {shadow[2]:7.1f}")
    if not args.skip_replay:
        print("replay of a generated day (estimate on arrival vs the true start, as a share of the wait): "
              "median / p90 error")
        for scenario in args.scenarios.split(","):
            model, load = scenario.split(":")
            pooled: dict[str, list[float]] = {}
            apart: dict[str, list[float]] = {}
            for seed in range(args.seed, args.seed + args.seeds):
                r = replay(random.Random(seed), model=model, load=float(load), sigma=args.sigma)
                for k, v in r["errors"].items():
                    pooled.setdefault(k, []).extend(v)
                for k, v in r["apart"].items():
                    apart.setdefault(k, []).extend(v)
                q = {k: quantiles(v) for k, v in r["errors"].items()}
                print(f"  {model:6} load {float(load):.0%} seed {seed}: {r['jobs']} jobs, CPUs busy "
                      f"{r['utilisation']:.0%}, {r['waited']} waited (median wait {r['median_wait'] / 60:.0f} min); "
                      + ", ".join(f"{k} {a:.0%} / {b:.0%}" for k, (a, b) in q.items()), flush=True)
            q = {k: quantiles(v) for k, v in pooled.items()}
            print(f"  {model:6} load {float(load):.0%}, {args.seeds} seeds pooled ({len(pooled['limits'])} jobs): "
                  + ", ".join(f"{k} {a:.0%} / {b:.0%}" for k, (a, b) in q.items()), flush=True)
            q = {k: quantiles(v) for k, v in apart.items() if v}
            print(f"  {model:6} load {float(load):.0%}, against the start without later arrivals: "
                  + ", ".join(f"{k} {a:.0%} / {b:.0%}" for k, (a, b) in q.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
