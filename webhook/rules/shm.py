"""/dev/shm: a memory-backed emptyDir mounted at /dev/shm in every container.

Container runtimes give /dev/shm 64 MiB, which MPI, PyTorch data loaders and
many HPC codes outgrow at once. Init containers get it too. A container that
already mounts something at /dev/shm is left alone, and the volume gets a name
no user volume has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from ..draft import Draft
from ..units import format_memory, parse_quantity
from ..yamlsrc import Node

if TYPE_CHECKING:
    from ..bundle import Bundle
from .base import ALL_POD_TEMPLATE_KINDS, CONTAINER_LISTS, Ctx, Finding, RuleType, deny

MOUNT_PATH = "/dev/shm"


@dataclass(frozen=True, slots=True)
class Settings:
    """``size``: fixed sizeLimit; ``fraction``: of the pod's memory limit, within min/max."""

    volume_name: str = "batchgate-shm"
    size: Fraction | None = None
    fraction: Fraction | None = None
    min_size: Fraction | None = None
    max_size: Fraction | None = None
    size_text: str | None = field(init=False, repr=False, compare=False)  # ``size``, formatted once
    # sizeLimits by the memory limits (as written) they come from: the Fraction sum, product,
    # clamps and format_memory's hashing of a Fraction cost ~20k instructions a review, and the
    # same few limits recur. Bounded by MEMO_SIZE entries of at most MEMO_LIMITS strings.
    memo: dict[tuple[str, ...], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size_text", None if self.size is None else format_memory(self.size))
        object.__setattr__(self, "memo", {})


MEMO_SIZE = 1024
MEMO_LIMITS = 16


def parse(node: Node, bundle: Bundle) -> Settings:
    node.mapping(allowed=("volumeName", "size", "fractionOfMemoryLimit", "minSize", "maxSize"))

    def qty(key: str) -> Fraction | None:
        n = node.get(key)
        return n.parsed(parse_quantity, expected="a quantity like 1Gi") if n else None

    fraction = None
    if (f := node.get("fractionOfMemoryLimit")) is not None:
        if isinstance(f.value, bool) or not isinstance(f.value, int | float) or not 0 < f.value <= 1:
            f.fail("expected a number in (0, 1], e.g. 0.5")
        fraction = Fraction(str(f.value))
    vn = node.get("volumeName")
    return Settings(
        volume_name=vn.str(pattern=r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", hint="a DNS label") if vn else "batchgate-shm",
        size=qty("size"),
        fraction=fraction,
        min_size=qty("minSize"),
        max_size=qty("maxSize"),
    )


def _memory_limit(holder: Any, where: str) -> Any:
    """``holder.resources.limits.memory`` (None if not set); ValueError naming what is not an
    object on the way (the API server would refuse it too, but a dry run or an offline check
    reaches this first)."""
    if not isinstance(holder, dict):
        raise ValueError(f"{where} is not an object")
    resources = holder.get("resources") or {}
    if not isinstance(resources, dict):
        raise ValueError(f"{where}.resources is not an object")
    limits = resources.get("limits") or {}
    if not isinstance(limits, dict):
        raise ValueError(f"{where}.resources.limits is not an object")
    return limits.get("memory")


def size_limit(settings: Settings, spec: dict[str, Any]) -> str | None:
    """The emptyDir's sizeLimit, if it gets one."""
    if settings.fraction is None:
        return settings.size_text
    pod_limit = _memory_limit(spec, "spec")
    if pod_limit is not None:  # pod-level resources (Kubernetes 1.32+): the pod's own limit
        limits = [pod_limit]
    else:
        limits = []
        for i, c in enumerate(spec.get("containers") or []):  # app containers
            limit = _memory_limit(c, f"containers[{i}]")
            if limit is None:
                for earlier in limits:  # a malformed one before it is still an error
                    parse_quantity(earlier)
                return settings.size_text  # no total memory limit: fall back to the fixed size
            limits.append(limit)
    key = tuple(limits)
    if (known := settings.memo.get(key)) is not None:
        return known
    total: Fraction | int = 0
    for limit in limits:
        total += parse_quantity(limit)
    size = total * settings.fraction
    if settings.min_size is not None:
        size = max(size, settings.min_size)
    if settings.max_size is not None:
        size = min(size, settings.max_size)
    text = format_memory(size)
    # Strings only: True == 1 as a key, and a bool is no quantity (pod-level limits are not
    # shape-checked).
    if len(key) <= MEMO_LIMITS and len(settings.memo) < MEMO_SIZE and all(type(v) is str for v in key):
        settings.memo[key] = text
    return text



def mutate(settings: Settings, draft: Draft, ctx: Ctx) -> list[Finding]:
    if ctx.shape is None:
        return []
    path = ctx.shape.pod_spec
    spec = draft.get(*path)
    if not isinstance(spec, dict):
        return []
    if leave_alone(spec):
        return []
    # One pass over the containers (the shape check made them and their mounts objects):
    # which need the mount, and whether any mounts a volume of our name at /dev/shm.
    volume_name = settings.volume_name
    needy: list[tuple[str, int]] = []
    ours_mounted = False
    for key in CONTAINER_LISTS:
        items = spec.get(key)
        if type(items) is not list:
            continue
        for i, c in enumerate(items):
            has_own = False  # something at /dev/shm already, or the host's /dev over /dev
            for m in c.get("volumeMounts") or ():
                at = m.get("mountPath")
                if type(at) is str and at.startswith("/dev"):
                    at = at.rstrip("/")
                    if at == MOUNT_PATH:
                        has_own = True
                        ours_mounted = ours_mounted or m.get("name") == volume_name
                    elif at == "/dev":
                        has_own = True
            if not has_own:
                needy.append((key, i))
    volumes = spec.get("volumes") or []
    try:
        size = size_limit(settings, spec)
    except ValueError as e:  # a memory limit out of bounds (1e999999999) or malformed
        return [deny(f"cannot size /dev/shm from the containers' memory limits: {e}")]
    # The volume this policy made before (a workload's template admitted earlier, now
    # updated): reused, its size kept to what the containers now ask for. A user's volume of
    # that name that nothing mounts at /dev/shm is not ours.
    own = None
    if ours_mounted:
        own = next((i for i, v in enumerate(volumes) if isinstance(v, dict) and v.get("name") == volume_name
                    and isinstance(v.get("emptyDir"), dict) and v["emptyDir"].get("medium") == "Memory"), None)
    name = volume_name
    if own is not None:
        if (volumes[own].get("emptyDir") or {}).get("sizeLimit") != size:
            empty = draft.edit(*path, "volumes", own, "emptyDir")
            if size is None:
                empty.pop("sizeLimit", None)
            else:
                empty["sizeLimit"] = size
        if not needy:
            return []
        pod = draft.edit(*path)
    elif not needy:
        return []
    else:
        taken = {v.get("name") for v in volumes if isinstance(v, dict)}
        n = 1
        while name in taken:
            name, n = f"{volume_name}-{n}", n + 1
        empty_dir: dict[str, str] = {"medium": "Memory"}
        if size is not None:
            empty_dir["sizeLimit"] = size
        pod = draft.edit(*path)
        draft.child(pod, "volumes", create=list).append({"name": name, "emptyDir": empty_dir})
    for key, i in needy:
        mounts = draft.child(draft.child(draft.child(pod, key), i), "volumeMounts", create=list)
        mounts.append({"name": name, "mountPath": MOUNT_PATH})
    return []


WINDOWS_LABELS = ("kubernetes.io/os", "beta.kubernetes.io/os")


def leave_alone(spec: dict[str, Any]) -> bool:
    """Pods whose /dev/shm is not ours to replace: Windows pods (a Memory emptyDir does not
    exist there), and pods sharing the host's IPC namespace (hostIPC: their /dev/shm is the
    host's, on purpose)."""
    if spec.get("hostIPC") is True:
        return True
    pod_os = spec.get("os")
    if pod_os and str(pod_os.get("name") or "").lower() == "windows":
        return True
    selector = spec.get("nodeSelector")
    if selector and isinstance(selector, dict):
        for key in WINDOWS_LABELS:
            value = selector.get(key)
            if value is not None and str(value).lower() == "windows":
                return True
    return False


TYPE = RuleType(
    name="shm",
    doc=(
        "A memory-backed emptyDir at `/dev/shm` in every container, init containers too; a user's "
        "own `/dev/shm` is left alone."
    ),
    parse=parse,
    mutate=mutate,
    default_kinds=ALL_POD_TEMPLATE_KINDS,
    default_operations=("CREATE", "UPDATE"),
    mutate_operations=("CREATE", "UPDATE"),
    decides_pod=True,
    order=30,
)
