"""``batchgate reconcile``: settings from flags and the bundle, then the controller."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from .settings import QueuePolicy, Settings

log = logging.getLogger(__name__)


def settings_from_args(args: argparse.Namespace, bundle: Any) -> Settings:
    from ..units import parse_duration

    d = Settings()
    crash = os.environ.get("BATCHGATE_RECONCILER_CRASH_AFTER_WRITES")

    def dur(name: str, default: float) -> float:
        v = getattr(args, name, None)
        return float(parse_duration(v)) if v else default

    return Settings(
        warning_lead=int(dur("warning_lead", d.warning_lead)),
        resync_period=dur("resync", d.resync_period),
        drain_timeout=dur("drain_timeout", d.drain_timeout),
        queues=QueuePolicy.from_bundle(bundle),
        queues_since=time.time(),  # a maximum lowered while no reconciler ran still warns first
        namespace=getattr(args, "namespace", None) or None,
        leader_elect=not getattr(args, "no_leader_elect", False),
        lease_name=getattr(args, "lease_name", None) or d.lease_name,
        lease_namespace=(getattr(args, "lease_namespace", None) or os.environ.get("BATCHGATE_LEASE_NAMESPACE")
                         or os.environ.get("POD_NAMESPACE") or d.lease_namespace),
        identity=getattr(args, "identity", None) or os.environ.get("POD_NAME")
        or f"{socket.gethostname()}_{os.getpid()}",
        metrics_port=int(getattr(args, "metrics_port", 0) or 0),
        crash_after_writes=int(crash) if crash else None,
    )


def policy_loader(policies: str) -> Callable[[], QueuePolicy | None]:
    """Reads the bundle as it is now (a mounted ConfigMap changes under us); None when it
    does not load, and the controller keeps the last good queue policy and says it is stale."""
    from ..rules import load_bundle
    from ..yamlsrc import BundleError

    def reload_policy() -> QueuePolicy | None:
        try:
            return QueuePolicy.from_bundle(load_bundle(policies))
        except BundleError as e:
            log.warning("bundle does not load; keeping the last good one: %s", e,
                        extra={"fields": {"error": str(e)}})
            return None

    return reload_policy


def run(args: argparse.Namespace) -> int:
    from ..bundle import default_policies
    from ..rules import load_bundle
    from ..yamlsrc import BundleError
    from .controller import Controller
    from .errors import KubeError
    from .kube import KubeApi

    try:
        bundle = load_bundle(args.policies or default_policies())
    except BundleError as e:
        print(f"batchgate: bundle error: {e}", file=sys.stderr)
        return 2
    try:
        settings = settings_from_args(args, bundle)
    except ValueError as e:
        print(f"batchgate: {e}", file=sys.stderr)
        return 2
    try:
        api = KubeApi.connect(args.kubeconfig, timeout=settings.request_timeout)
    except KubeError as e:
        print(f"batchgate: {e}", file=sys.stderr)
        return 2
    reload_policy = policy_loader(args.policies or default_policies())
    controller = Controller(api, settings, dry_run=args.dry_run, reload_policy=reload_policy)
    try:
        if args.once:
            return controller.run_once()
        if settings.metrics_port:
            from prometheus_client import start_http_server

            from .metrics import REGISTRY

            start_http_server(settings.metrics_port, registry=REGISTRY)

        def _stop(signum: int, frame: Any) -> None:
            log.info("signal %d: stopping", signum)
            controller.stop()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: every thread's stack, on stderr
        log.info("reconciler starting", extra={"fields": {
            "identity": settings.identity, "namespace": settings.namespace or "(all)",
            "lease": f"{settings.lease_namespace}/{settings.lease_name}" if settings.leader_elect else "(none)",
            "dry_run": args.dry_run, "bundle": bundle.fingerprint,
        }})
        return controller.run()
    except KubeError as e:
        print(f"batchgate: {e}", file=sys.stderr)
        return 1
    finally:
        api.close()


def _open(args: argparse.Namespace) -> tuple[QueuePolicy, Any] | int:
    """The bundle's queues and a client, for the commands that read the cluster; else the exit code
    (2), said on stderr."""
    from ..bundle import default_policies
    from ..rules import load_bundle
    from ..yamlsrc import BundleError
    from .errors import KubeError
    from .kube import KubeApi

    try:
        queues = QueuePolicy.from_bundle(load_bundle(args.policies or default_policies()))
    except BundleError as e:
        print(f"batchgate: bundle error: {e}", file=sys.stderr)
        return 2
    try:
        return queues, KubeApi.connect(args.kubeconfig)
    except KubeError as e:
        print(f"batchgate: {e}", file=sys.stderr)
        return 2


def report(args: argparse.Namespace, what: str) -> int:
    """``batchgate queue`` / ``batchgate maintenance``: list the cluster once, print the report."""
    import time

    from .cache import Cache
    from .errors import Forbidden, KubeError
    from .report import (
        MAINTENANCE_COLUMNS,
        QUEUE_COLUMNS,
        QUEUE_WIDE,
        maintenance_rows,
        queue_rows,
        render,
        summarize,
    )

    opened = _open(args)
    if isinstance(opened, int):
        return opened
    queues, api = opened
    try:
        namespace = getattr(args, "namespace", None)
        cache = Cache(api, Settings())
        try:
            cache.list_once()  # the whole cluster: what others run decides when yours starts
        except Forbidden:
            if not namespace:
                raise
            log.warning("may not list the whole cluster; estimates count only namespace %s", namespace)
            cache = Cache(api, Settings(namespace=namespace))
            cache.list_once()
        snapshot, now = cache.snapshot(), time.time()
        if what == "queue":
            usage = stored_usage(api, getattr(args, "batchgate_namespace", None), quiet=True)
            billing = usage.at(now, queues.fair_share.half_life) if usage is not None else {}
            rows = queue_rows(snapshot, now, namespace=namespace, queues=queues, usage=billing)
            sys.stdout.write(render(rows, args.output, QUEUE_COLUMNS, QUEUE_WIDE))
        else:
            rows = maintenance_rows(snapshot, now, queues=queues)
            if snapshot.windows is None:
                print("batchgate: the MaintenanceWindow CRD is not installed", file=sys.stderr)
            sys.stdout.write(render(rows if args.output == "json" else summarize(rows), args.output,
                                    MAINTENANCE_COLUMNS))
            if args.output == "wide":
                for r in rows:
                    for kind in ("stops", "holds"):
                        for name in r[kind]:
                            print(f"{r['name']}: {'stops' if kind == 'stops' else 'holds back'} {name}")
        return 0
    except KubeError as e:
        print(f"batchgate: {e}", file=sys.stderr)
        return 1
    finally:
        api.close()


def stored_usage(api: Any, namespace: str | None, *, quiet: bool = False) -> Any:
    """The usage the reconciler stores (ledger.py), ``Usage()`` when none is stored yet; None when it
    cannot be read (said on stderr unless ``quiet``: ``batchgate queue`` then orders without it)."""
    from .errors import KubeError, NotFound
    from .ledger import NAME
    from .model import CONFIG_MAP
    from .usage import KEY, Usage, parse

    ns = namespace or Settings().lease_namespace
    try:
        cm = api.get(CONFIG_MAP, ns, NAME)
    except NotFound:
        if not quiet:
            print(f"batchgate: no usage stored yet (no ConfigMap {ns}/{NAME}): the reconciler writes it every "
                  "fairShare.interval while a queue is gated", file=sys.stderr)
        return Usage()
    except KubeError as e:
        if not quiet:
            print(f"batchgate: cannot read the usage in ConfigMap {ns}/{NAME}: {e}", file=sys.stderr)
        return None
    try:
        return parse((cm.get("data") or {}).get(KEY))
    except ValueError as e:
        if not quiet:
            print(f"batchgate: ConfigMap {ns}/{NAME} does not hold usage batchgate can read: {e}", file=sys.stderr)
        return None


def accounting(args: argparse.Namespace, what: str) -> int:
    """``batchgate share`` (sshare) and ``batchgate usage`` (a short sreport), from the stored usage."""
    from collections import Counter

    from ..units import parse_duration
    from .cache import Cache
    from .errors import KubeError
    from .queue import waiting
    from .report import (
        SHARE_COLUMNS,
        SHARE_WIDE,
        USAGE_COLUMNS,
        render,
        share_rows,
        usage_rows,
        with_total,
    )

    since = 0
    if what == "usage":
        try:
            since = parse_duration(args.since)
        except ValueError as e:
            print(f"batchgate: --since: {e}", file=sys.stderr)
            return 2
    opened = _open(args)
    if isinstance(opened, int):
        return opened
    queues, api = opened
    try:
        stored = stored_usage(api, args.batchgate_namespace)
        if stored is None:
            return 1
        now = time.time()
        if what == "usage":
            rows = usage_rows(stored, now, since)
            sys.stdout.write(render(rows if args.output == "json" else with_total(rows), args.output, USAGE_COLUMNS))
            return 0
        counts: dict[str, int] | None = None
        try:
            cache = Cache(api, Settings())
            cache.list_once()
            billing = stored.at(now, queues.fair_share.half_life)
            counts = dict(Counter(w.account for w in waiting(cache.snapshot(), now, queues, billing, lambda o: None)))
        except KubeError as e:
            print(f"batchgate: cannot list the cluster ({e}): WAITING is unknown, and the factors count only the "
                  "accounts with usage", file=sys.stderr)
        sys.stdout.write(render(share_rows(stored, now, queues, counts), args.output, SHARE_COLUMNS, SHARE_WIDE))
        return 0
    finally:
        api.close()
