"""How long work will really run: runtime predictions from what finished before.

Slurm's ``squeue --start`` assumes that every running job runs to its time limit. Jobs rarely do:
in the logs of the Parallel Workloads Archive a job's runtime is spread over the whole range
below its limit (Mu'alem and Feitelson 2001), so start estimates built on limits run far
ahead of reality. Tsafrir, Etsion and Feitelson ("Backfilling using system-generated predictions
rather than user runtime estimates", IEEE TPDS 18(6), 2007) predict a job's runtime as the average
of the last two jobs of the same user that finished, never more than the job's own limit, and
raise a prediction that a running job outlives step by step, up to the limit. This module
predicts much the same way, with facts the reconciler has seen (and corrects an outlived prediction
differently, see ``corrected``):

- A **run** is a workload that ended well: a Job with condition ``Complete`` (its start as the
  reconciler recorded it, ``batchgate.io/started-at``, else the earliest start of its own pods,
  ``model.owns``; its end, ``status.completionTime``), or a bare pod that ``Succeeded`` (first
  container start, last container finish). A job the reconciler stops at its deadline is a run too, a *censored*
  one: it ran its whole limit and would have run longer. Its Job or pod is deleted, so the
  controller takes it from the plan (``Plan.runs``) into its in-memory history. It counts at
  its limit: a lower bound, and the right answer for the next run with the same limit
  (predictions never exceed a job's limit). Failed work says little of how long a good run
  takes and is left out; a ScavengerJob's segments are stopped on purpose and left out too.
- The **key** of a workload stands for Tsafrir's "same user": its namespace and queue, and what
  it runs (its containers' images). A prediction uses the last runs with the same key, else
  the last in the same namespace and queue, else there is none (the time limit stands).
- **Two statistics of the same runs.** ``predict``, Tsafrir's, is the *mean* of the last two:
  what the forecast of arrivals sums (forecast.py: work arriving, a mean quantity). ``likely`` is
  the *median* runtime, what start times are placed with (shadow.py): an expected start is
  calibrated when half the workloads start before it, a median of the start, and runtimes are
  skewed to the right (a few runs far longer than most; the replay's models draw them lognormal),
  so their mean is above their median: every job ahead held for its mean holds its room too
  long, and the estimate is late. ``likely`` is the geometric mean of the last five
  runs, the median's estimate for a spread that is symmetric in log (the lognormal), and with five
  runs, not two, less noisy (a noisy prediction makes the earliest-fit placement late too). In
  bench/queue_replay.py's fair-share day it took the share of workloads starting before their
  expected start from 66 % to 57 % (every runtime known exactly: 57 %), see bench/README.md.
- The **history** holds, per key, the last runs by end time. It is built from the Jobs and pods
  still in the cluster at each pass, and the controller keeps it in memory too, so runs whose
  objects were since deleted (a Job's ``ttlSecondsAfterFinished``) still count for as long as the
  reconciler runs. It is not written anywhere: a restarted reconciler starts from what the
  cluster still shows, and predictions are only ever estimates (deadlines use the time limit).

Everything here is a pure function of its inputs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .model import JobView, PodView, Snapshot, admitted_queue, job_of

KEEP = 5  # runs kept per key: ``likely`` is their geometric mean
MEAN_OF = 2  # ``predict`` averages the last two, as Tsafrir et al.
MAX_KEYS = 20_000  # keys kept in memory; past that, those that ended longest ago are forgotten
RunKey = tuple[str, str, str]  # (namespace, queue, program)


@dataclass(frozen=True, slots=True)
class Run:
    key: RunKey
    uid: str
    started: float
    finished: float
    censored: bool = False  # stopped at its time limit: it would have run at least this long

    @property
    def seconds(self) -> float:
        return self.finished - self.started


# per key: the last runs, oldest first, as (finished, uid, seconds)
History = Mapping[RunKey, tuple[tuple[float, str, float], ...]]


def key_of(namespace: str, queue: str | None, program: str) -> RunKey:
    return (namespace, queue or "", program)


def job_key(job: JobView) -> RunKey:
    """Its namespace, its queue (the one it was admitted to, when the webhook recorded it, else its
    label) and its images."""
    return key_of(job.ref.namespace, admitted_queue(job), job.program)


def pod_key(pod: PodView) -> RunKey:
    return key_of(pod.ref.namespace, admitted_queue(pod), pod.program)


def finished_runs(snapshot: Snapshot) -> list[Run]:
    """The runs the cluster still shows."""
    runs: list[Run] = []
    first_start: dict[str, float] = {}
    for pod in snapshot.pods.values():
        if pod.owner is not None:
            if pod.started is not None and (job := job_of(snapshot, pod)) is not None:
                t = first_start.get(job.ref.uid)
                if t is None or pod.started < t:
                    first_start[job.ref.uid] = pod.started
            continue
        if pod.phase == "Succeeded" and pod.started is not None and pod.finished is not None \
                and pod.finished >= pod.started and pod.segment is None:
            runs.append(Run(pod_key(pod), pod.ref.uid, pod.started, pod.finished))
    for job in snapshot.jobs.values():
        if job.completed is None or job.segment is not None or (job.owner is not None
                                                                 and job.owner.kind == "ScavengerJob"):
            continue
        started = job.started_at_t if job.started_at_t is not None else first_start.get(job.ref.uid)
        if started is None:
            continue  # when it started is not known: no fact to learn from
        # completionTime is the control plane's clock, container starts a node's: a node clock ahead
        # must not make a run negative
        runs.append(Run(job_key(job), job.ref.uid, started, max(job.completed, started)))
    return runs


def remember(history: History, runs: Iterable[Run]) -> dict[RunKey, tuple[tuple[float, str, float], ...]]:
    """``history`` with ``runs`` added (each once, by uid), the last ``KEEP`` per key."""
    out = dict(history)
    for r in runs:
        have = out.get(r.key, ())
        if any(uid == r.uid for _, uid, _ in have):
            continue
        out[r.key] = tuple(sorted((*have, (r.finished, r.uid, r.seconds))))[-KEEP:]
    if len(out) > MAX_KEYS:
        for k in sorted(out, key=lambda k: out[k][-1][0])[: len(out) - MAX_KEYS]:
            del out[k]
    return out


def by_queue(history: History) -> dict[tuple[str, str], tuple[tuple[float, str, float], ...]]:
    """The same history per (namespace, queue), whatever runs: the fallback when a program has no runs."""
    out: dict[tuple[str, str], tuple[tuple[float, str, float], ...]] = {}
    for (ns, queue, _), runs in history.items():
        have = out.get((ns, queue), ())
        out[(ns, queue)] = tuple(sorted((*have, *runs)))[-KEEP:]
    return out


@dataclass(frozen=True, slots=True)
class Predictor:
    """Predicted runtimes for one pass. ``predict`` is what the shadow schedule asks."""

    history: History
    queues: Mapping[tuple[str, str], tuple[tuple[float, str, float], ...]]

    @staticmethod
    def of(history: History) -> Predictor:
        return Predictor(history, by_queue(history))

    def _runs(self, key: RunKey) -> tuple[tuple[float, str, float], ...]:
        return self.history.get(key) or self.queues.get((key[0], key[1])) or ()

    def predict(self, key: RunKey, limit: float | None) -> float | None:
        """The mean runtime in seconds of the last ``MEAN_OF`` runs (never more than ``limit``), or
        None: no runs to go by. What a sum of work asks for (the forecast of arrivals)."""
        runs = self._runs(key)[-MEAN_OF:]
        if not runs:
            return None
        seconds = sum(s for _, _, s in runs) / len(runs)
        return min(seconds, limit) if limit is not None else seconds

    def likely(self, key: RunKey, limit: float | None) -> float | None:
        """The median runtime in seconds (never more than ``limit``), or None: no runs to go by. The
        geometric mean of the runs kept (at most ``KEEP``; a run under a second counts as one). What a
        start time asks for (the shadow schedule): see the module's docstring."""
        runs = self._runs(key)
        if not runs:
            return None
        seconds = math.exp(sum(math.log(max(s, 1.0)) for _, _, s in runs) / len(runs))
        return min(seconds, limit) if limit is not None else seconds


def corrected(predicted: float, elapsed: float, limit: float) -> float:
    """The runtime to expect of a job that has run ``elapsed`` seconds of its ``limit``: as
    predicted while the prediction holds. Once the job outlives it, all that is known is that it
    ends between now and its limit; runtimes are spread roughly evenly below the limit in the
    workload archives (Mu'alem and Feitelson), so the middle of what is left is expected, a
    new estimate at every pass (Tsafrir et al. raise an outlived prediction in small steps
    instead, a choice made for backfilling: for start times it says "a minute from now" over and
    over, see bench/README.md's figures)."""
    if predicted > elapsed:
        return predicted
    return (elapsed + max(limit, elapsed)) / 2
