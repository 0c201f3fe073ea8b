"""The reconciler: the controller half of batchgate, acting on the cluster over time.

Layout, from the pure core outwards (the planner layer never imports ``kubernetes``,
does no I/O and never reads the clock; docs/dev/architecture.md and the import contracts in
pyproject.toml say which module may import which):

- ``model``: what the planner sees: slim, immutable views of Pods, Jobs, Nodes
  and PodGroups, made once per object change from the API's JSON.
- ``actions``: what the planner decides: ``Action`` records (kind, target,
  reason, message, and the writes that carry it out).
- ``planner``: ``plan(snapshot, now, settings)``: deadlines, gang teardown,
  PodGroup lifecycle, and the behaviours of their own: ``maintenance``
  (maintenance windows) and ``scavenger`` (ScavengerJobs).
- ``settings``: the frozen ``Settings`` dataclass with documented defaults.
- ``lease``: the leader-election decision (``lease_step``) and the elector
  thread around it.
- ``kube``: the only module that talks to the API server (official client,
  raw JSON), raising ``errors`` of our own.
- ``cache``: list + watch reflectors feeding the snapshot.
- ``actuator``: runs actions: Events, patches with optimistic concurrency,
  deletions with uid preconditions, evictions, retries with backoff.
- ``controller`` / ``main``: the loop and ``batchgate reconcile``.

State that must survive a restart lives on the objects (annotations
``batchgate.io/started-at``, ``batchgate.io/deadline``,
``batchgate.io/warned-for``) and in Event names derived from what they report,
so that a re-run finds a duplicate as ``AlreadyExists`` instead of sending it
twice.
"""
