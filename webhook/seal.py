"""The admission seal: a keyed MAC that the webhook writes on the pod templates it admitted.

A pod that a controller makes (a ReplicaSet's, a StatefulSet's, a Job's...) reaches the webhook
from the controller, not from the user who wrote its template; whoever that was is unknown at the
pod's CREATE. The checks that depend on who asks (may this caller use this queue, this priority
class, whole nodes) were made on the template, when the workload was created or its template
updated. But UPDATE admission fails open: a template changed while the webhook was unreachable
was never judged, and neither was the template of a kind batchgate does not see
(ReplicationController). So the webhook seals what it judged: when it admits a template, it
writes ``batchgate.io/admitted`` on the template's annotations, an HMAC-SHA256 over a
:func:`projection` of exactly the fields those checks read (the queue label, the exclusive label,
the time limit, the priority class) and the namespace. Controllers copy template annotations into
what they make, so a pod carries the seal of its template; at the pod's CREATE the webhook trusts
the controller's pod as already judged only when the seal verifies against the pod's own fields.
A template changed without admission, a seal copied onto different fields or into another
namespace, a made-up one: none verify, and the pod is judged with no one's grants.

Pure: keys come in as bytes (the edge reads the key file), no clock, no I/O. Keys have ids so
they rotate: the first key of the :class:`Keyring` signs, every key verifies.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass, field
from typing import Any

from .contract import EXCLUSIVE_LABEL, QUEUE_LABEL, SEAL_ANNOTATION, TIME_LIMIT_ANNOTATION
from .workloads import Shape, dig

MIN_KEY_BYTES = 32  # HMAC-SHA256's own strength; shorter keys are refused at load
KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
MAC_CHARS = 43  # base64url of 32 bytes, unpadded


class SealKeyError(ValueError):
    """A key file that cannot be used; the message names the line."""


@dataclass(frozen=True, slots=True)
class Keyring:
    """Seal keys by id; ``keys[0]`` signs, all verify (current first, then previous ones)."""

    keys: tuple[tuple[str, bytes], ...]
    # Per key id, SHA-256 states after the HMAC inner and outer pads (RFC 2104): a MAC is then two
    # copies and updates, no HMAC object (this runs on every pod a controller makes).
    _pads: dict[str, tuple[Any, Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.keys:
            raise SealKeyError("a keyring needs at least one key")
        pads = {}
        for kid, secret in self.keys:
            block = (hashlib.sha256(secret).digest() if len(secret) > 64 else secret).ljust(64, b"\0")
            pads[kid] = (hashlib.sha256(bytes(b ^ 0x36 for b in block)), hashlib.sha256(bytes(b ^ 0x5C for b in block)))
        object.__setattr__(self, "_pads", pads)

    @property
    def current(self) -> str:
        return self.keys[0][0]

    def key(self, kid: str) -> bytes | None:
        for k, secret in self.keys:
            if k == kid:
                return secret
        return None


# `batchgate check`, `batchgate test` and unit tests sign with this published key: what they show
# is the shape of a seal, which no cluster accepts (its keys are its own secret).
OFFLINE = Keyring((("offline", b"batchgate offline key: not a secret, not for clusters"),))


def parse_keyring(text: str, source: str = "seal keys") -> Keyring:
    """Lines ``<id> <base64 key>``; ``#`` comments and blank lines are skipped. The first key
    signs; every key verifies (rotation: add the new key at the end, let every replica load it,
    move it first; drop the old one once nothing sealed with it is left)."""
    keys: list[tuple[str, bytes]] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise SealKeyError(f"{source}:{n}: expected '<id> <base64 key>', got {len(parts)} fields")
        kid, encoded = parts
        if not KEY_ID.fullmatch(kid):
            raise SealKeyError(f"{source}:{n}: key id {kid!r} must be letters, digits, '.', '_', '-' (at most 63)")
        if any(kid == k for k, _ in keys):
            raise SealKeyError(f"{source}:{n}: duplicate key id {kid!r}")
        try:
            secret = base64.b64decode(encoded, validate=True)
        except ValueError:
            raise SealKeyError(f"{source}:{n}: key {kid!r} is not base64") from None
        if len(secret) < MIN_KEY_BYTES:
            raise SealKeyError(f"{source}:{n}: key {kid!r} has {len(secret)} bytes; at least {MIN_KEY_BYTES} "
                            "(make one with `batchgate seal-key`)")
        keys.append((kid, secret))
    if not keys:
        raise SealKeyError(f"{source}: no key; make one with `batchgate seal-key`")
    return Keyring(tuple(keys))


def new_key_line(kid: str, secret: bytes) -> str:
    return f"{kid} {base64.b64encode(secret).decode()}"


def projection(obj: Any, shape: Shape, namespace: str) -> bytes | None:
    """What the seal covers, canonically: the namespace, and on the pod (or pod template) the
    queue label, the exclusive label, the time-limit annotation and ``priorityClassName``: the
    fields whose use depends on who asks (queue-access, queue-priority) or whose check a
    controller's pod skips (time-limit). Controllers copy them unchanged from the template into
    what they make, and no admission plugin of the API server rewrites them (the Priority plugin
    fills an absent class only, and an admitted template always names one).

    For a workload a controller made (a Deployment's ReplicaSet, a CronJob's Job), whose own
    labels and annotations win over its template's (webhook.workloads.requested_queue), those may
    only repeat the template's values: None (no projection; nothing verifies) otherwise."""
    meta, spec = shape.template(obj)
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    queue, exclusive = labels.get(QUEUE_LABEL), labels.get(EXCLUSIVE_LABEL)
    limit = annotations.get(TIME_LIMIT_ANNOTATION)
    if not shape.is_pod:
        outer = dig(obj, ("metadata",))
        outer = outer if isinstance(outer, dict) else {}
        outer_labels = outer.get("labels") or {}
        for key, value in ((QUEUE_LABEL, queue), (EXCLUSIVE_LABEL, exclusive)):
            if outer_labels.get(key, value) != value:
                return None
        if (any(path == ("metadata",) for path, _ in shape.time_limit_at)
                and (outer.get("annotations") or {}).get(TIME_LIMIT_ANNOTATION, limit) != limit):
            return None
    fields = (namespace, queue, exclusive, limit, spec.get("priorityClassName"))
    # One field per line; a value that is not a plain string (absent, or a type the API server
    # refuses anyway) is written as "-" + its repr, which no string field can equal.
    return "\n".join(["v1", *(f"={v}" if isinstance(v, str) and "\n" not in v else f"-{v!r}" for v in fields)]).encode()


def _mac(keys: Keyring, kid: str, data: bytes) -> str:
    """HMAC-SHA256 of ``data`` under key ``kid`` (hmac.digest's value), base64url."""
    inner_pad, outer_pad = keys._pads[kid]
    inner = inner_pad.copy()
    inner.update(data)
    outer = outer_pad.copy()
    outer.update(inner.digest())
    return base64.urlsafe_b64encode(outer.digest()).rstrip(b"=").decode()


def seal(keys: Keyring, data: bytes) -> str:
    """The annotation value: ``<key id>.<MAC>``."""
    kid = keys.current
    return f"{kid}.{_mac(keys, kid, data)}"


def verifies(keys: Keyring, value: Any, data: bytes | None) -> bool:
    """The seal ``value`` was made by one of ``keys`` over exactly ``data``."""
    if data is None or not isinstance(value, str):
        return False
    kid, dot, mac = value.rpartition(".")
    if not dot or len(mac) != MAC_CHARS or kid not in keys._pads:
        return False
    return hmac.compare_digest(_mac(keys, kid, data), mac)


def seal_of(obj: Any, shape: Shape) -> Any:
    """The seal on the pod or pod template, as written (None when absent)."""
    annotations = shape.template(obj)[0].get("annotations")
    return annotations.get(SEAL_ANNOTATION) if isinstance(annotations, dict) else None


def sealed(keys: Keyring, obj: Any, shape: Shape, namespace: str) -> bool:
    """The pod or template carries a seal that verifies against its own fields."""
    value = seal_of(obj, shape)
    return value is not None and verifies(keys, value, projection(obj, shape, namespace))
