"""Usage for fair share: what each account's pods were allocated while bound, decayed with a half-life.

Accounting data, not a cache: the leader folds what pods held since the last sample into the
document every ``fairShare.interval`` and stores it in the ConfigMap ``batchgate-usage`` in
batchgate's namespace (``controller.py``), so a restart or a new leader goes on from the stored
figures and loses at most one interval. An admin can read it (``batchgate share``,
``batchgate usage``), back it up and restore it as any ConfigMap.

Pure: the document in, the pods and ``now`` in, the next document out. A pod's allocation is
counted from its first container start to its end (the last container's finish, the failure, or
``now`` while it runs), so a sample taken late still counts what ran meanwhile, as long as the
pod is still there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..bundle import FairShare
from ..units import format_time
from .model import PodView

KEY = "usage.json"
VERSION = 1
DAYS_KEPT = 35  # the undecayed daily figures `batchgate usage --since` reads
MAX_BYTES = 900_000  # a ConfigMap holds 1 MiB: the oldest days go first past this
GPU = "nvidia.com/gpu"  # what `batchgate usage` reports as GPU-hours (and any resource with "gpu" in its name)


@dataclass(frozen=True, slots=True)
class Usage:
    sampled_at: float | None = None  # epoch s of the last sample; None: never sampled
    # account -> decayed billing (weighted resource-seconds), as of sampled_at
    billing: Mapping[str, float] = field(default_factory=dict)
    # "YYYY-MM-DD" -> "account/queue" -> [core-seconds, gpu-seconds], undecayed
    days: Mapping[str, Mapping[str, list[float]]] = field(default_factory=dict)

    def at(self, now: float, half_life: int) -> dict[str, float]:
        """Each account's decayed billing as of ``now``."""
        if self.sampled_at is None:
            return dict(self.billing)
        k = 2.0 ** (-max(now - self.sampled_at, 0.0) / half_life)
        return {a: v * k for a, v in self.billing.items()}


def _gpu(name: str) -> bool:
    return name == GPU or "gpu" in name.lower()


def _held(pod: PodView, since: float, now: float) -> float:
    """Seconds of (since, now] during which the pod held its allocation."""
    if not pod.node or pod.started is None:
        return 0.0
    if pod.terminal:
        end = pod.finished if pod.finished is not None else pod.failed_at
        if end is None:
            return 0.0  # ended at some time we cannot tell: counted up to the last sample only
    else:
        end = now
    return max(min(end, now) - max(pod.started, since), 0.0)


def accrue(usage: Usage, pods: Iterable[PodView], now: float, fair: FairShare,
           account_of: Any, queue_of: Any) -> Usage:
    """The document after folding in what ``pods`` held since the last sample. The first sample only
    starts the clock."""
    if usage.sampled_at is None:
        return Usage(now, dict(usage.billing), dict(usage.days))
    since = usage.sampled_at
    if now <= since:
        return usage
    billing = usage.at(now, fair.half_life)
    weights = dict(fair.weights)
    w_cpu, w_mem = weights.get("cpu", 0.0), weights.get("memory", 0.0)
    day = format_time(now)[:10]
    days = {d: dict(v) for d, v in usage.days.items()}
    today = days.setdefault(day, {})
    for pod in pods:
        dt = _held(pod, since, now)
        if dt <= 0:
            continue
        account = account_of(pod)
        cores = pod.cpu_m / 1000
        gpus = sum(v for k, v in pod.extended if _gpu(k)) / 1000
        cost = w_cpu * cores + w_mem * pod.mem_b / 2**30 + sum(weights.get(k, 0.0) * v / 1000 for k, v in pod.extended)
        billing[account] = billing.get(account, 0.0) + cost * dt
        cell = today.setdefault(f"{account}/{queue_of(pod)}", [0.0, 0.0])
        today[f"{account}/{queue_of(pod)}"] = [cell[0] + cores * dt, cell[1] + gpus * dt]
    keep = sorted(days)[-DAYS_KEPT:]
    return Usage(now, {a: v for a, v in billing.items() if v > 1e-9}, {d: days[d] for d in keep})


def render(usage: Usage, fair: FairShare) -> str:
    days = {d: {k: [round(x, 1) for x in v] for k, v in sorted(cells.items())}
            for d, cells in sorted(usage.days.items())}
    doc: dict[str, Any] = {"version": VERSION, "sampledAt": usage.sampled_at, "halfLife": fair.half_life,
                           "billing": {a: round(v, 3) for a, v in sorted(usage.billing.items())}, "days": days}
    text = json.dumps(doc, separators=(",", ":"))
    while len(text) > MAX_BYTES and days:
        del days[min(days)]
        text = json.dumps(doc, separators=(",", ":"))
    return text


def parse(text: str | None) -> Usage:
    """The stored document; raises ValueError when it is not one (the caller keeps it, unwritten)."""
    if not text:
        return Usage()
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise ValueError(f"not a version {VERSION} usage document")
    at = doc.get("sampledAt")
    billing = doc.get("billing") or {}
    days = doc.get("days") or {}
    if not (at is None or isinstance(at, int | float)) or not isinstance(billing, dict) or not isinstance(days, dict):
        raise ValueError("malformed usage document")
    good = {str(a): float(v) for a, v in billing.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0}
    cells = {str(d): {str(k): [float(x) for x in v[:2]] for k, v in c.items()
                      if isinstance(v, list) and len(v) >= 2 and all(isinstance(x, int | float) for x in v[:2])}
             for d, c in days.items() if isinstance(c, dict)}
    return Usage(float(at) if at is not None else None, good, cells)


def factors(billing: Mapping[str, float], accounts: Iterable[str], fair: FairShare) -> dict[str, float]:
    """Slurm's classic fair-share factor per account, ``2^(-U/S)``: U its share of all usage, S its
    share of all shares (among the accounts with usage or waiting work). 1.0 for everyone while
    nobody has used anything; 0.5 for an account that used exactly its share."""
    names = set(accounts) | set(billing)
    total_use = sum(billing.get(a, 0.0) for a in names)
    total_shares = sum(fair.shares_of(a) for a in names) or 1.0
    out = {}
    for a in names:
        s = fair.shares_of(a) / total_shares
        u = billing.get(a, 0.0) / total_use if total_use > 0 else 0.0
        out[a] = 2.0 ** (-u / s)
    return out
