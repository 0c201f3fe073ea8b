"""``scavengerjob``: a ScavengerJob's spec is valid, every bad field named.

``ScavengerJob`` (batchgate.io/v1alpha1) is checked field by field against the
contract in ``policies/scavengerjob/README.md``; each problem names its field
path so a user can fix them all in one go. Metadata-only updates of a stored
object (finalizers, labels) pass unchecked.

A running ScavengerJob (one that has started a segment: ``running``) may shrink, not
grow, by its user's edit, as Slurm treats a running job: it started only when all its
pods fit within the scavengers' share (``maxShare``) by the size it had, and each next
segment starts from its spec without that check, so raising ``spec.pods`` or a request
or limit in ``spec.resources`` is refused (``grown_while_running``); admins and the
reconciler may, and any edit of one that waits (its start is checked) is allowed.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..bundle import Principals
from ..contract import (
    GROUP,
    SCAVENGERJOB_MAX_CHECKPOINT_EXIT_CODE,
    SCAVENGERJOB_MAX_CPU,
    SCAVENGERJOB_MAX_MEMORY,
    SCAVENGERJOB_MAX_NAME,
    SCAVENGERJOB_MAX_PODS,
    scavengerjob_checkpoint,
)
from ..units import DurationTooLong, format_memory, json_int, parse_duration, shown
from .base import (
    QOS_RESOURCES,
    RECONCILER,
    Ctx,
    Finding,
    RuleType,
    deny,
    no_settings,
    quantity_or_none,
    resources_raised,
)

SPEC_FIELDS = ("image", "command", "args", "env", "resources", "volumes", "pods", "runAsUser", "duration",
               "checkpointExitCode", "checkpoint")
VOLUME_SOURCES = {"persistentVolumeClaim": "claimName", "configMap": "name", "secret": "secretName"}
VOLUME_FIELDS = ("name", "mountPath", "readOnly", *VOLUME_SOURCES)
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
MOST = {"cpu": (SCAVENGERJOB_MAX_CPU, str(SCAVENGERJOB_MAX_CPU)),
        "memory": (SCAVENGERJOB_MAX_MEMORY, format_memory(SCAVENGERJOB_MAX_MEMORY))}


def _string_list(errors: list[str], value: Any, path: str, *, required: bool) -> None:
    if value is None:
        if required:
            errors.append(f"{path}: required, a list of strings like [\"python\", \"train.py\"]")
        return
    if not isinstance(value, list) or (required and not value):
        got = f", got {value!r}" if not isinstance(value, list) else ""
        errors.append(f"{path}: must be a non-empty list of strings like [\"python\", \"train.py\"]{got}")
        return
    for i, item in enumerate(value):
        if not isinstance(item, str):
            errors.append(f"{path}[{i}]: must be a string (quote numbers), got {item!r}")


def _check_resources(errors: list[str], res: Any) -> None:
    if not isinstance(res, dict):
        errors.append("spec.resources: required, with limits (and optionally equal requests) for cpu and memory")
        return
    for key in res:
        if key not in ("requests", "limits"):
            errors.append(f"spec.resources.{key}: unknown field (known: requests, limits)")
    limits, requests = res.get("limits"), res.get("requests")
    for name, part in (("limits", limits), ("requests", requests)):
        if part is not None and not isinstance(part, dict):
            errors.append(f"spec.resources.{name}: must be a mapping of resource name to quantity")
    limits = limits if isinstance(limits, dict) else {}
    requests = requests if isinstance(requests, dict) else {}
    for name, part in (("limits", limits), ("requests", requests)):
        for r, q in part.items():
            value = quantity_or_none(q)
            if value is None:
                errors.append(f"spec.resources.{name}.{r}: {q!r} is not a quantity (e.g. 500m, 4, 8Gi)")
            elif value <= 0:
                errors.append(f"spec.resources.{name}.{r}: must be more than zero, got {q}")
            elif (most := MOST.get(r)) is not None and value > most[0]:
                errors.append(f"spec.resources.{name}.{r}: {q} is more than {most[1]}, the most a scavenger pod "
                              f"may ask for")
    for r in QOS_RESOURCES:
        if r not in limits:
            hint = f" (equal to spec.resources.requests.{r}, {requests[r]})" if r in requests else ""
            errors.append(f"spec.resources.limits.{r}: required{hint}")
    for r, q in requests.items():
        if r in limits and quantity_or_none(q) is not None and quantity_or_none(limits[r]) is not None \
                and quantity_or_none(q) != quantity_or_none(limits[r]):
            errors.append(
                f"spec.resources.requests.{r}: {q} must equal spec.resources.limits.{r} ({limits[r]}), "
                f"scavengers are Guaranteed QoS"
            )
        elif r not in limits and r not in QOS_RESOURCES:
            errors.append(f"spec.resources.limits.{r}: required, equal to spec.resources.requests.{r} ({q})")


def _check_volumes(errors: list[str], volumes: Any) -> None:
    if volumes is None:
        return
    if not isinstance(volumes, list):
        errors.append("spec.volumes: must be a list")
        return
    names: dict[str, int] = {}
    paths: dict[str, int] = {}
    for i, vol in enumerate(volumes):
        at = f"spec.volumes[{i}]"
        if not isinstance(vol, dict):
            errors.append(f"{at}: must be a mapping with name, mountPath and one source")
            continue
        for key in vol:
            if key not in VOLUME_FIELDS:
                errors.append(f"{at}.{key}: unknown field (known: {', '.join(VOLUME_FIELDS)})")
        name = vol.get("name")
        if not isinstance(name, str) or not DNS_LABEL.fullmatch(name) or len(name) > 63:
            errors.append(f"{at}.name: required, a lowercase DNS label like data, got {name!r}")
        elif name in names:
            errors.append(f"{at}.name: {name!r} is also the name of spec.volumes[{names[name]}]")
        else:
            names[name] = i
        path = vol.get("mountPath")
        if not isinstance(path, str) or not path.startswith("/"):
            errors.append(f"{at}.mountPath: required, an absolute path like /data, got {path!r}")
        else:
            norm = posixpath.normpath(path)
            if norm in paths:
                errors.append(f"{at}.mountPath: {path} is already mounted by spec.volumes[{paths[norm]}]")
            else:
                paths[norm] = i
        if "readOnly" in vol and not isinstance(vol["readOnly"], bool):
            errors.append(f"{at}.readOnly: must be true or false")
        sources = [s for s in VOLUME_SOURCES if s in vol]
        if len(sources) != 1:
            found = f"found {', '.join(sources)}" if sources else "found none"
            errors.append(f"{at}: needs exactly one of {', '.join(VOLUME_SOURCES)} ({found})")
        for source in sources:
            ref, key = vol[source], VOLUME_SOURCES[source]
            if not isinstance(ref, dict):
                errors.append(f"{at}.{source}: must be a mapping with {key}")
                continue
            for k in ref:
                if k != key:
                    errors.append(f"{at}.{source}.{k}: unknown field (known: {key})")
            target = ref.get(key)
            if not isinstance(target, str) or not DNS_SUBDOMAIN.fullmatch(target) or len(target) > 253:
                errors.append(f"{at}.{source}.{key}: required, the name of a {source} in this namespace, got {target!r}")


def name_problem(obj: Any) -> str | None:
    """A name longer than a label value may be (it labels the ScavengerJob's Jobs and pods)."""
    md = obj.get("metadata") if isinstance(obj, dict) else None
    name = md.get("name") if isinstance(md, dict) else None
    if isinstance(name, str) and len(name) > SCAVENGERJOB_MAX_NAME:
        return (f"metadata.name: {len(name)} characters, more than {SCAVENGERJOB_MAX_NAME} (the name labels its Jobs "
                f"and pods, and a label value has at most {SCAVENGERJOB_MAX_NAME})")
    return None


@dataclass(frozen=True, slots=True)
class SJSpec:
    """A ScavengerJob's spec as the reconciler runs it, and every problem of the object.

    The one parse the admission rule (which denies on ``problems``) and the reconciler's view
    (which fails the object ``InvalidSpec`` with the same words) share. The typed fields are set
    only when the whole object has no problem: a spec is run as written or not at all.
    """

    problems: tuple[str, ...]
    pods: int | None = None
    cpu_milli: int | None = None  # per pod
    memory: int | None = None  # bytes per pod
    duration: int | None = None  # s: spec.duration, or spec.checkpoint.interval when only that is declared
    checkpoint_code: int | None = None  # spec.checkpointExitCode
    checkpoint_interval: int | None = None  # spec.checkpoint.interval, s


def parse_scavengerjob(obj: Any) -> SJSpec:
    """A ScavengerJob (its name, its spec) parsed: its typed spec, or its problems, each starting
    with its field path."""
    problems = _problems(obj)
    if problems:
        return SJSpec(problems=tuple(problems))
    spec = obj["spec"]
    limits = spec["resources"]["limits"]
    interval = scavengerjob_checkpoint(spec)[0]
    duration = spec.get("duration")
    return SJSpec(
        problems=(),
        pods=json_int(spec.get("pods", 1)),
        cpu_milli=_ceil(quantity_or_none(limits["cpu"]), 1000),
        memory=_ceil(quantity_or_none(limits["memory"]), 1),
        duration=parse_duration(duration) if duration is not None else interval,
        checkpoint_code=json_int(spec.get("checkpointExitCode")),
        checkpoint_interval=interval,
    )


def _ceil(q: Fraction | None, scale: int) -> int:
    assert q is not None  # parsed only once _problems found it a quantity
    q *= scale
    return -(-q.numerator // q.denominator)


def scavengerjob_problems(obj: Any) -> list[str]:
    """Every problem of a ScavengerJob (its name, its spec), each starting with its field path."""
    return list(parse_scavengerjob(obj).problems)


def _problems(obj: Any) -> list[str]:
    named = name_problem(obj)
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return [*([named] if named else []),
                "spec: required (see the ScavengerJob contract: image, command, resources, runAsUser, duration, ...)"]
    errors: list[str] = [named] if named else []
    for key in spec:
        if key not in SPEC_FIELDS:
            errors.append(f"spec.{key}: unknown field (known: {', '.join(SPEC_FIELDS)})")
    image = spec.get("image")
    if image is None:
        errors.append("spec.image: required, a container image like registry.example.org/app:1.0")
    elif not isinstance(image, str) or not image or any(c.isspace() for c in image):
        errors.append(f"spec.image: must be a container image like registry.example.org/app:1.0, got {image!r}")
    _string_list(errors, spec.get("command"), "spec.command", required=True)
    _string_list(errors, spec.get("args"), "spec.args", required=False)
    env = spec.get("env")
    if env is not None:
        if not isinstance(env, list):
            errors.append("spec.env: must be a list of {name, value}")
        else:
            for i, e in enumerate(env):
                if not isinstance(e, dict) or set(e) - {"name", "value"} \
                        or not isinstance(e.get("name"), str) or not ENV_NAME.fullmatch(e["name"]) \
                        or not isinstance(e.get("value", ""), str):
                    errors.append(f"spec.env[{i}]: must be {{name: VAR_NAME, value: \"string\"}}, got {e!r}")
    _check_resources(errors, spec.get("resources"))
    _check_volumes(errors, spec.get("volumes"))
    pods = spec.get("pods")
    if pods is not None and (json_int(pods) is None or pods < 1):
        errors.append(f"spec.pods: must be a whole number >= 1, got {shown(pods)}")
    elif pods is not None and pods > SCAVENGERJOB_MAX_PODS:
        errors.append(f"spec.pods: {pods} is more than {SCAVENGERJOB_MAX_PODS}, the most pods a ScavengerJob may have")
    uid = spec.get("runAsUser")
    if uid is None:
        errors.append("spec.runAsUser: required, a non-root user id >= 1, e.g. 1000")
    elif json_int(uid) is None or uid < 1:
        errors.append(f"spec.runAsUser: must be a user id >= 1 (scavengers never run as root), got {uid!r}")
    duration = spec.get("duration")
    if duration is None and spec.get("checkpoint") is None:
        errors.append("spec.duration: required, the protection period, e.g. 30m or 2h (or declare "
                      "spec.checkpoint.interval)")
    elif duration is None:
        pass  # one long pod: spec.checkpoint.interval stands for it
    else:
        try:
            parse_duration(duration if isinstance(duration, str) else "")
        except DurationTooLong as e:
            errors.append(f"spec.duration: {e}")
        except ValueError:
            errors.append(f"spec.duration: {shown(duration)} is not a duration, write e.g. 30m, 2h or 1h30m")
    code = spec.get("checkpointExitCode")
    if code is not None and (json_int(code) is None or not 1 <= code <= SCAVENGERJOB_MAX_CHECKPOINT_EXIT_CODE):
        errors.append(f"spec.checkpointExitCode: must be a whole number 1..{SCAVENGERJOB_MAX_CHECKPOINT_EXIT_CODE} (the code the workload exits with "
                      f"right after a checkpoint, to end its segment; 128 and up mean killed by a signal), got {code!r}")
    errors += scavengerjob_checkpoint(spec)[1]
    return errors


FINISHED = ("Completed", "Failed")  # status.phase: no segment starts again
WRITERS = Principals(service_accounts=(RECONCILER,))  # besides admins, who may grow a running ScavengerJob


def running(obj: Any) -> str | None:
    """The Job of the segment a ScavengerJob has started (``status.jobName``, set by the reconciler
    when it starts one and cleared when it goes back to wait: reconciler.scavenger plans a start,
    checked against the free room and ``maxShare``, only while it is empty); None while it waits,
    and once it has finished."""
    st = obj.get("status") if isinstance(obj, dict) else None
    if not isinstance(st, dict) or st.get("phase") in FINISHED:
        return None
    job = st.get("jobName")
    return job if isinstance(job, str) and job else None


def _pods(obj: Any) -> int | None:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return json_int(spec.get("pods", 1)) if isinstance(spec, dict) else None


def grown_while_running(old: Any, obj: Any) -> list[tuple[str, str, str]]:
    """What an edit of a running ScavengerJob (``running(old)``) raises, as (what, before, after):
    ``spec.pods`` (1 when unset), and any request or limit in ``spec.resources`` (rules.base's
    ``resources_raised``: a request, else its limit, per pod; a limit raised or removed); nothing
    when it waits or has finished."""
    if running(old) is None:
        return []
    before, after = _pods(old), _pods(obj)
    out = [("spec.pods", str(before), str(after))] if before is not None and after is not None and after > before else []
    spec, was = obj.get("spec"), old.get("spec")
    if isinstance(spec, dict) and isinstance(was, dict):
        out += [(f"the {what} of spec.resources", a, b) for what, a, b in resources_raised(was, spec, limits=True)]
    return out


def validate_scavengerjob(settings: None, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    old = ctx.old_object
    if ctx.operation == "UPDATE" and isinstance(old, dict) and old.get("spec") == obj.get("spec"):
        return []  # metadata-only updates (finalizers, labels) of a stored object pass
    subject = f"ScavengerJob {ctx.namespace}/{ctx.name or '(generated name)'}"
    problems = scavengerjob_problems(obj)
    out = [deny(f"invalid {subject}: {'; '.join(problems)}")] if problems else []
    if ctx.operation == "UPDATE" and isinstance(old, dict) and not ctx.admin \
            and not WRITERS.contains(ctx.username, ctx.groups) and (up := grown_while_running(old, obj)):
        what = ", ".join(f"{w} from {a} to {b}" for w, a, b in up)
        out.append(deny(
            f"{subject} is running (Job {running(old)}): it started when all its pods fit within the scavengers' "
            f"share of the cluster, by the size it had, and its next segments start from its spec without that "
            f"check; raising {what} while it runs would take more than the scavenger policy allowed. Lowering is "
            f"allowed, and so is any edit while it waits; to run it bigger, delete it and submit it again with "
            f"the new size (it waits until that fits), or ask an admin"))
    return out


TYPE = RuleType(
    name="scavengerjob",
    doc=(
        "Validates `ScavengerJob` (batchgate.io/v1alpha1) field by field."
    ),
    parse=no_settings,
    validate=validate_scavengerjob,
    default_kinds=((GROUP, "v1alpha1", "ScavengerJob"),),
    default_operations=("CREATE", "UPDATE"),
    default_failure_policy="Fail",
)
