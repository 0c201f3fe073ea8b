"""Prometheus metrics (prometheus-client: exposition format and multiprocess support
are not worth re-writing by hand)."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter as Bag
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

REGISTRY = CollectorRegistry(auto_describe=True)


class Tally(Collector):
    """A labelled counter for the admission hot path: plain integers in a dict,
    turned into Prometheus samples only when /metrics is scraped.

    ``Counter.labels(...).inc()`` takes a lock and validates labels on every call
    (one per policy per request); the server is a single asyncio thread per
    process, so a dict increment does. ``inc_each`` counts a whole request's
    (policy, outcome) pairs with one increment, expanded at scrape time.
    """

    BAGS_LIMIT = 1024  # distinct outcome combinations kept apart before folding

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...], registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, labelnames
        self._one: Bag[tuple[str, ...]] = Bag()
        # bag -> [count]: a cell, so that counting a bag hashes it once (a tuple's hash is not
        # cached: ~1k instructions for a Pod's ten outcomes)
        self._bags: dict[tuple[tuple[str, ...], ...], list[int]] = {}
        registry.register(self)

    def inc(self, *labels: str) -> None:
        self._one[labels] += 1

    def inc_each(self, bag: tuple[tuple[str, ...], ...]) -> None:
        """Add one to each label set in ``bag``."""
        cell = self._bags.get(bag)
        if cell is not None:
            cell[0] += 1
            return
        if len(self._bags) >= self.BAGS_LIMIT:
            self._fold()
        self._bags[bag] = [1]

    def value(self, *labels: str) -> int:
        return self._totals().get(labels, 0)

    def _fold(self) -> None:
        self._one, self._bags = self._totals(), {}

    def _totals(self) -> Bag[tuple[str, ...]]:
        totals = Bag(self._one)
        for bag, (n,) in self._bags.items():
            for labels in bag:
                totals[labels] += n
        return totals

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, n in sorted(self._totals().items()):
            family.add_metric(labels, n)
        yield family


REQUESTS = Tally(
    "batchgate_admission_requests",
    "AdmissionReview requests by endpoint, operation and outcome "
    "(allowed, mutated, denied, bad_request, unavailable).",
    ("endpoint", "operation", "outcome"),
    REGISTRY,
)
class Durations(Collector):
    """A labelled histogram for the request hot path, exposed as prometheus-client's own.

    ``Histogram.observe`` takes a lock for the sum and for the bucket and walks the bounds
    in Python: about 10k instructions per request, an eighth of what the server adds to a
    no-op handler. Here one list of counts per label set, the bucket found by ``bisect``
    (in C); turned into cumulative buckets only when /metrics is scraped. Single-threaded
    use, like :class:`Tally` (each server process observes on its event loop only).
    """

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...],
                 buckets: tuple[float, ...], registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, labelnames
        self.bounds = tuple(sorted(buckets))  # le bounds; +Inf is the last count
        self._series: dict[tuple[str, ...], list[Any]] = {}  # labels -> [counts, sum]
        registry.register(self)

    def series(self, labels: tuple[str, ...]) -> list[Any]:
        """The [counts, sum] of one label set, for a caller to keep and pass to record()."""
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = [[0] * (len(self.bounds) + 1), 0.0]
        return series

    def record(self, series: list[Any], seconds: float) -> None:
        series[0][bisect_left(self.bounds, seconds)] += 1  # the first bound >= seconds: le is inclusive
        series[1] += seconds

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        les = [*(floatToGoString(b) for b in self.bounds), "+Inf"]  # type: ignore[no-untyped-call]
        for labels, (counts, total) in sorted(self._series.items()):
            family.add_metric(labels, list(zip(les, accumulate(counts), strict=True)), total)
        yield family


HTTP_DURATION = Durations(
    "batchgate_http_request_duration_seconds",
    "Time from request headers to response, by path (other: any unknown path) and status code, "
    "errors included.",
    ("path", "code"),
    (0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0),
    REGISTRY,
)
_HTTP_SERIES: dict[tuple[str, int], list[Any]] = {}


def observe_http(path: str, code: int, seconds: float) -> None:
    """One request's duration; the series of each (path, code) found once, then kept here."""
    series = _HTTP_SERIES.get((path, code))
    if series is None:
        series = _HTTP_SERIES[(path, code)] = HTTP_DURATION.series((path, str(code)))
    HTTP_DURATION.record(series, seconds)


POLICY_DECISIONS = Tally(
    "batchgate_policy_decisions",
    "What each policy did: mutated, denied, warned, passed, error.",
    ("policy", "outcome"),
    REGISTRY,
)
BUNDLE_RELOADS = Counter(
    "batchgate_bundle_reloads_total",
    "Policy bundle (re)loads by result; a failed one keeps the last good bundle.",
    ["result"],
    registry=REGISTRY,
)
BUNDLE_INFO = Gauge(
    "batchgate_bundle_info",
    "The bundle in force (value 1) by content fingerprint.",
    ["fingerprint"],
    registry=REGISTRY,
)
BUNDLE_STALE = Gauge(
    "batchgate_bundle_stale",
    "1 while the policy files on disk do not load and the last good bundle stays in force.",
    registry=REGISTRY,
)
NAMESPACE_FACTS_RELOADS = Counter(
    "batchgate_namespace_labels_reloads_total",
    "Reloads of the namespace labels the reconciler publishes (grants by namespaceSelector), by "
    "result; a failed one keeps the last good labels.",
    ["result"],
    registry=REGISTRY,
)
NAMESPACE_FACTS_AGE = Gauge(
    "batchgate_namespace_labels_age_seconds",
    "Seconds since the namespace labels in force were published (-1: none loaded).",
    registry=REGISTRY,
)
NAMESPACE_FACTS_UNUSABLE = Gauge(
    "batchgate_namespace_labels_unusable",
    "1 while the bundle grants queues by namespace label and the published labels are missing, "
    "stale or do not load: such grants admit nobody (names and globs still do).",
    registry=REGISTRY,
)
CERT_RELOADS = Counter(
    "batchgate_certificate_reloads_total",
    "Serving certificate reloads by result.",
    ["result"],
    registry=REGISTRY,
)
CERT_EXPIRY = Gauge(
    "batchgate_certificate_expiry_timestamp_seconds",
    "Expiry of the serving certificate in use (Unix time).",
    registry=REGISTRY,
)
