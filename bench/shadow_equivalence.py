"""Before/after check for a change to the shadow schedule that must not change its answers.

    python bench/shadow_equivalence.py [--against main] [--snapshots 300] [--passes 10] [--instructions]

Loads ``webhook/reconciler/shadow.py`` as it is at ``--against`` (a git revision), runs both
versions on generated snapshots (random nodes, racks, running pods, pending pods with priorities,
node selectors and gangs, maintenance windows) and on the planning benchmark's cluster
(bench_shadow.py: 10,000 pods, 20 windows), checks that every estimate is the same, then times
both on the benchmark's cluster, interleaved in one run (a loaded machine slows both alike). The
same for the batch queue's placement on bench_queue.py's cluster (10,000 gated pods in 2,000
workloads, 500 nodes), with the arguments a planning pass gives it. ``--instructions`` counts
instead the CPU instructions of that placement, both versions, under valgrind's callgrind
(switched on once the cluster is built; two placements minus none; ``PYTHONHASHSEED=0``): the
same figure on a busy machine as on a quiet one.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_queue  # noqa: E402
import bench_shadow as b  # noqa: E402

from webhook.reconciler import queue  # noqa: E402
from webhook.reconciler import shadow as current  # noqa: E402
from webhook.reconciler.model import Snapshot, job_view, pod_view, window_view  # noqa: E402
from webhook.reconciler.planner import effective_limit, plan  # noqa: E402
from webhook.reconciler.settings import QueuePolicy, Settings  # noqa: E402
from webhook.rules import load_bundle  # noqa: E402
from webhook.units import format_time  # noqa: E402


def load_at(rev: str) -> ModuleType:
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:webhook/reconciler/shadow.py"],
                          check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "shadow_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("webhook.reconciler.shadow_before", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def generated(rng: random.Random) -> Snapshot:
    nn = rng.randint(1, 30)
    nodes = [b.node(f"n{i}", rng.choice((4, 8, 16, 64)), f"r{i % 4}") for i in range(nn)]
    pods: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    for i in range(rng.randint(0, 150)):
        limit = rng.choice((600, 3600, 7200, 4 * 3600))
        pods.append(b.pod(f"run-{i}", cpu=rng.choice((1, 2, 4)), limit=limit, node_name=f"n{rng.randrange(nn)}",
                          started=b.NOW - rng.uniform(0, limit)))
    for i in range(rng.randint(0, 120)):
        prio, created = rng.choice((0, 0, 1000)), b.NOW - rng.uniform(0, 3600)
        if rng.random() < 0.2:
            size = rng.randint(2, 5)
            j = {"apiVersion": "batch/v1", "kind": "Job",
                 "metadata": {"name": f"g{i}", "namespace": "bench", "uid": f"uid-g{i}", "resourceVersion": "1",
                              "annotations": {"batchgate.io/time-limit": "2h"}}}
            jobs.append(j)
            for k in range(size):
                pods.append(b.pod(f"g{i}-{k}", cpu=rng.choice((2, 8)), limit=7200, priority=prio, created=created,
                                  owner=j, labels={"batchgate.io/pod-group": f"g{i}",
                                                   "batchgate.io/pod-group-size": str(size)}))
            continue
        p = b.pod(f"w{i}", cpu=rng.choice((1, 2, 4, 8, 16, 80)), limit=rng.choice((600, 3600, 3 * 3600)),
                  priority=prio, created=created)
        if rng.random() < 0.2:
            p["spec"]["nodeSelector"] = {"rack": rng.choice(("r0", "r1", "nowhere"))}
        pods.append(p)
    windows = []
    for k in range(rng.randint(0, 3)):
        start = b.NOW + rng.uniform(-3600, 5 * 3600)
        windows.append(b.window(f"w{k}", start, start + rng.choice((1800, 7200)), rack=f"r{k}"))
    return Snapshot.of(pods=[pod_view(p) for p in pods], jobs=[job_view(j) for j in jobs], nodes=nodes,
                       windows=[window_view(w) for w in windows])


def windows_of(snap: Snapshot) -> list[Any]:
    return [w.window for w in (snap.windows or {}).values() if w.window is not None]


def answers(mod: ModuleType, snap: Snapshot, now: float = b.NOW, **kw: Any) -> list[dict[str, Any]]:
    return [dataclasses.asdict(e) for e in mod.shadow_schedule(snap, now, windows_of(snap), **kw)]


def queue_case() -> tuple[Snapshot, dict[str, Any]]:
    """bench_queue.py's cluster and the arguments ``planner.plan`` places its queue with."""
    settings = Settings(queues=QueuePolicy.from_bundle(load_bundle(ROOT / "policies")))
    policy = settings.queues
    cl = bench_queue.cluster(2000, 500, 500, gated=True)
    snap, usage = cl.snapshot(), cl.usage
    limit_of = lambda o: effective_limit(o, settings)  # noqa: E731
    waiting = queue.waiting(snap, bench_queue.NOW, policy, usage, limit_of)
    return snap, {"limit_of": limit_of, "queued": queue.as_queued(waiting, policy), "easy": policy.easy,
                  "preempts_below": queue.preempts_below(policy), "class_values": policy.class_values,
                  "released": queue.released(policy)}


def interleaved(before: ModuleType, passes: int, run: Any) -> dict[str, list[float]]:
    """CPU ms of ``run(module)`` per pass, the two versions in turn."""
    times: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(passes):
        for name, mod in (("before", before), ("after", current)):
            t = time.process_time()
            run(mod)
            times[name].append((time.process_time() - t) * 1000)
    return times


def report(times: dict[str, list[float]], against: str) -> None:
    for name in ("before", "after"):
        ts = sorted(times[name])
        print(f"  {name} ({against if name == 'before' else 'this tree'}): {ts[0]:7.1f} / {statistics.median(ts):7.1f}")


def common(a: list[dict[str, Any]], c: list[dict[str, Any]]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Both answers on the fields both revisions' Estimates have (a field added since is no difference)."""
    keys = sorted(set(a[0]) & set(c[0])) if a and c else []
    return [tuple(x[k] for k in keys) for x in a], [tuple(x[k] for k in keys) for x in c]


def count(before: ModuleType, which: str, n: int) -> None:
    """Inside callgrind: build the queue's cluster uninstrumented, then place it ``n`` times."""
    mod = before if which == "before" else current
    qsnap, qargs = queue_case()
    subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True, capture_output=True)
    for _ in range(n):
        mod.shadow_schedule(qsnap, bench_queue.NOW, [], **qargs)


def instructions(against: str) -> dict[str, float]:
    """Instructions per placement of the queue's cluster, per version: two placements minus none."""

    def total(which: str, n: int) -> int:
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null", sys.executable,
               __file__, "--against", against, "--_count", which, str(n)]
        err = subprocess.run(cmd, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": "0"}).stderr
        return int(re.search(r"Collected : (\d+)", err).group(1))  # type: ignore[union-attr]

    return {which: (total(which, 2) - total(which, 0)) / 2 for which in ("before", "after")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--against", default="main", help="git revision of the shadow schedule to compare with")
    ap.add_argument("--snapshots", type=int, default=300)
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--instructions", action="store_true",
                    help="count the instructions of the queue's placement with valgrind instead (slow, exact)")
    ap.add_argument("--_count", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    before = load_at(args.against)
    if args._count:
        count(before, args._count[0], int(args._count[1]))
        return 0
    if args.instructions:
        for which, n in instructions(args.against).items():
            print(f"the queue's placement, {which} ({args.against if which == 'before' else 'this tree'}): "
                  f"{n / 1e6:,.0f} M instructions")
        return 0
    rng = random.Random(7)
    n = 0
    for k in range(args.snapshots):
        snap = generated(rng)
        a, c = common(answers(before, snap), answers(current, snap))
        if a != c:
            print(f"snapshot {k}: estimates differ, first: {next((x, y) for x, y in zip(a, c, strict=False) if x != y)}")
            return 1
        n += len(a)
    big = b.big_cluster(random.Random(1))
    big = b.settle(big, plan(big, b.NOW, Settings()).actions)
    x, y = common(answers(before, big), answers(current, big))
    if x != y:
        print("the benchmark's cluster: estimates differ")
        return 1
    qsnap, qargs = queue_case()
    x, y = common(answers(before, qsnap, bench_queue.NOW, **qargs), answers(current, qsnap, bench_queue.NOW, **qargs))
    if x != y:
        print("the queue's cluster: placements differ")
        return 1
    print(f"same estimates for {n} workloads in {args.snapshots} generated snapshots, "
          f"{len(answers(current, big))} in the benchmark's cluster ({format_time(b.NOW)}) and "
          f"{len(x)} in the queue's")
    wins = windows_of(big)
    times = interleaved(before, args.passes, lambda mod: mod.shadow_schedule(big, b.NOW, wins))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; ms of CPU, best / median over "
          f"{args.passes} interleaved passes; shadow schedule, 10,000 pods, 20 windows:")
    report(times, args.against)
    print("the queue's placement, 10,000 gated pods in 2,000 workloads, 500 nodes:")
    report(interleaved(before, args.passes, lambda mod: mod.shadow_schedule(qsnap, bench_queue.NOW, [], **qargs)), args.against)
    return 0


if __name__ == "__main__":
    sys.exit(main())
