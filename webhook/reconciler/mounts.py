"""A missing Secret, as the kubelet tells it: a Warning Event ``FailedMount`` on the pod.

The reconciler may not read Secrets (docs/admin/security.md: a ``get`` would read their data, in
every namespace), so before a ScavengerJob starts it looks up the PVCs and ConfigMaps it mounts,
never its Secrets. The kubelet does read them: when a pod's Secret volume names a Secret that does
not exist, it reports on the pod, every couple of minutes while the pod waits in
ContainerCreating, a Warning Event with reason ``FailedMount`` and a message such as::

    MountVolume.SetUp failed for volume "creds" : secret "db-pass" not found

(``secrets "db-pass"`` from kubelets that read Secrets with a GET; a projected volume's errors come
as a list, ``[secret "a" not found, configmap "b" not found]``). The cache watches those Events only
(:data:`EVENT_FIELDS`, a field selector the API server applies) and keeps, of each that names a
missing Secret, a :class:`MountFailure`; the ScavengerJob controller (``scavenger.py``) fails the
ScavengerJob whose waiting pod it is about, naming the Secret, when that is a Secret the
ScavengerJob mounts on that volume and the Event comes from the kubelet of the pod's node.

Events can be written by whoever may create them in the namespace, so nothing here is believed
beyond that: a message that does not parse as the kubelet's names nothing, names are only what a
Secret or volume name can be, and the message is read no further than :data:`MAX_MESSAGE`.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The Events the cache watches: the API server filters them (RBAC cannot: list and watch of Events);
# "source" is the Event's source.component, else its reportingComponent.
EVENT_FIELDS = "involvedObject.kind=Pod,reason=FailedMount,type=Warning,source=kubelet"
KUBELET = "kubelet"
MAX_MESSAGE = 4096  # characters of a message read: the kubelet's are a line

# What the operation executor writes (``<prefix> for volume "<name>" : <error>``); a pod's volume
# name is a DNS label.
_MOUNT = re.compile(r'MountVolume\.SetUp failed for volume "([a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)" : ')
# The NotFound error of a Secret (its resource singular from the kubelet's watch-based cache, plural
# from a GET), anywhere in the error (a projected volume's list); the name a DNS subdomain.
_SECRET = re.compile(r'(?:^|[\[ ,])secrets? "([a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?)" not found')
_NAME = 253
_UID = 36


@dataclass(frozen=True, slots=True)
class MountFailure:
    """One kubelet Event saying a pod's Secret volume names a Secret that does not exist."""

    namespace: str
    pod_uid: str  # the pod it is about (involvedObject.uid)
    pod_name: str
    volume: str  # the pod's volume the kubelet could not mount
    secret: str  # the Secret it names
    host: str  # the node whose kubelet reports it (source.host, else reportingInstance)


def missing_secret(message: Any) -> tuple[str, str] | None:
    """(volume, Secret) a kubelet FailedMount message says is missing; None for any other message
    (another cause, another kind of object, a name no Secret can have, not the kubelet's words)."""
    if not isinstance(message, str):
        return None
    text = message[:MAX_MESSAGE]
    mount = _MOUNT.match(text)
    if mount is None:
        return None
    rest = text[mount.end():]
    found = _SECRET.search(rest)
    if found is None or not (found.start() == 0 or rest.startswith("[")):
        return None  # the error itself must be the NotFound, or a list of them
    return mount.group(1), found.group(1)


def mount_failure_view(obj: Mapping[str, Any]) -> MountFailure | None:
    """An Event as the cache keeps it: a :class:`MountFailure`, or None (kept nowhere) when it is
    not a kubelet's Warning FailedMount on a pod naming a missing Secret."""
    if obj.get("type") != "Warning" or obj.get("reason") != "FailedMount":
        return None
    about = obj.get("involvedObject")
    source = obj.get("source")
    source = source if isinstance(source, Mapping) else {}
    if not isinstance(about, Mapping) or about.get("kind") != "Pod":
        return None
    if source.get("component") != KUBELET and obj.get("reportingComponent") != KUBELET:
        return None
    parsed = missing_secret(obj.get("message"))
    if parsed is None:
        return None
    md = obj.get("metadata")
    md = md if isinstance(md, Mapping) else {}
    host = source.get("host") or obj.get("reportingInstance")
    return MountFailure(
        namespace=_text(md.get("namespace"), _NAME),
        pod_uid=_text(about.get("uid"), _UID),
        pod_name=_text(about.get("name"), _NAME),
        volume=parsed[0],
        secret=parsed[1],
        host=_text(host, _NAME),
    )


def _text(value: Any, limit: int) -> str:
    """A name or uid as kept: "" when not text; past ``limit`` cut one over it (it then equals no
    name or uid that fits, and is not kept whole)."""
    return value[:limit + 1] if isinstance(value, str) else ""
