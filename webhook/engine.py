"""The admission decision: AdmissionReview + bundle in, AdmissionReview response out.

This is the pure core. The HTTPS handlers, ``batchgate check`` and the tests all
call :func:`review`, so the CLI decides exactly what the cluster would. There is
no aiohttp, no file, no clock and no network in here; what the edges need to log
or count comes back in the :class:`Decision`.

Two error channels (as the API server expects):
- a malformed call raises :class:`BadReview` -> the edge answers HTTP 400;
- a request the policy rejects is a normal response with ``allowed: false``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

import orjson
import pybase64

from .bundle import Bundle, Ctx, Finding, Policy
from .contract import SEAL_ANNOTATION
from .draft import Draft, Path
from .kubefields import REQUIRED, RESIZE_SUBRESOURCE
from .seal import OFFLINE, Keyring, projection, seal, sealed
from .wire import OPERATIONS, AdmissionRequest, AdmissionResponse, AdmissionReview
from .workloads import Shape, dig, made_from_template, requested_queue, shape_of

Phase = Literal["mutate", "validate", "check"]  # which webhook asks; check: both, as `batchgate check`
PHASES: tuple[Phase, ...] = ("mutate", "validate", "check")
MAX_NAME = 253  # a DNS subdomain: the longest group, kind, version or name Kubernetes sends


COMPACT = json.JSONEncoder(separators=(",", ":"))  # one encoder, not one per json.dumps call


def dumps(value: Any) -> bytes:
    """Compact JSON bytes: orjson (UTF-8, a fifth of the stdlib encoder's time), or the
    stdlib encoder for what orjson refuses (integers past 64 bits, nesting past 255)."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return COMPACT.encode(value).encode()


class BadReview(ValueError):
    """The body is not an AdmissionReview v1 request we can answer (HTTP 400)."""


class OutOfBudget(Exception):
    """The review ran past its time budget; the edge may raise it inside a running
    policy (see webhook.server), which then answers with its failure mode."""


@dataclass(slots=True)
class Decision:
    uid: str
    allowed: bool = True
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    denials: list[str] = field(default_factory=list)
    outcomes: list[tuple[str, str]] = field(default_factory=list)  # (policy, outcome)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (policy, traceback)
    obj: dict[str, Any] | None = None  # the object after mutation
    skipped: str = ""  # why no policy ran (excluded namespace, subresource, ...)

    @property
    def message(self) -> str:
        return "; ".join(self.denials)


def review(body: Any, bundle: Bundle, *, phase: Phase, keys: Keyring = OFFLINE) -> tuple[AdmissionReview, Decision]:
    """Answer one AdmissionReview; raises BadReview for a malformed one."""
    decision = decide(body, bundle, phase=phase, keys=keys)
    return to_review(decision), decision


def to_review(decision: Decision) -> AdmissionReview:
    response: AdmissionResponse = {"uid": decision.uid, "allowed": decision.allowed}
    if decision.allowed and decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(dumps(decision.patch)).decode()
    if decision.warnings:
        response["warnings"] = decision.warnings
    if not decision.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": decision.message}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


_HEAD = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'


def encode_review(decision: Decision) -> bytes:
    """``to_review(decision)`` as the JSON bytes the HTTP edge sends, built directly.

    Same document, less work on the hot path: the base64 patch is ASCII with no
    character JSON must escape, so it goes in as is instead of being scanned by
    the encoder a second time (that scan alone cost as much as encoding the patch).
    pybase64 (SIMD) encodes it: 3k instructions for a Pod's patch of 1.3 KB, where the
    stdlib's binascii on Python 3.11 takes 23k, a byte at a time (to_review keeps the
    stdlib, so the tests that compare the two check pybase64 too).
    """
    if not decision.allowed:
        return dumps(to_review(decision))
    parts = [_HEAD, dumps(decision.uid), b',"allowed":true']
    if decision.patch:
        parts += (b',"patchType":"JSONPatch","patch":"',
                  pybase64.b64encode(dumps(decision.patch)), b'"')
    if decision.warnings:
        parts += (b',"warnings":', dumps(decision.warnings))
    parts.append(b"}}")
    return b"".join(parts)


def decide(body: object, bundle: Bundle, *, phase: Phase,
           over_budget: Callable[[], bool] | None = None, keys: Keyring = OFFLINE) -> Decision:
    """Decide one AdmissionReview (the decoded JSON body). Total: any body is a decision or
    a BadReview naming what is malformed; a policy that fails is an outcome, not an exception.

    ``keys`` seal the pod templates admitted here and verify the seals on what controllers make
    from them (webhook.seal); the server passes its own, offline callers the published OFFLINE
    keys.

    ``over_budget`` is asked before each policy (the edge passes a clock-based
    check; the core reads no clock): once it says yes, every policy still to run
    answers with its failure mode instead of running, as if it had failed.
    """
    req = parse_request(body)
    decision = Decision(uid=req["uid"])
    operation = req["operation"]
    obj = req.get("object") if operation not in ("DELETE", "CONNECT") else req.get("oldObject")
    sub = req.get("subResource")
    # An in-place resize (pods/resize) is judged by the policies that judge one (RuleType.resize),
    # at validation only: the API server takes no patch on it; every other subresource is left alone.
    resize = sub == RESIZE_SUBRESOURCE and operation == "UPDATE" and phase != "mutate"
    if sub and not resize:
        decision.skipped = f"subresource {sub}"
        return decision
    if obj is None:
        decision.skipped = "no object"
        return decision
    gvk = req["kind"]
    group, kind = gvk.get("group") or "", gvk["kind"]
    shape = shape_of(group, kind)
    check_shape(obj, shape, "request.object" if obj is req.get("object") else "request.oldObject")
    old = req.get("oldObject")
    if old is not None and old is not obj:
        check_shape(old, shape, "request.oldObject")
    meta: dict[str, Any] = obj.get("metadata") or {}
    namespace: str = req.get("namespace") or meta.get("namespace") or ""
    # Excluded namespaces are about the objects in them; a Namespace itself (its opt-out
    # label) is judged whatever its name.
    if namespace and bundle.excluded(namespace) and kind != "Namespace":
        decision.skipped = f"namespace {namespace} is excluded"
        return decision
    labels: dict[str, str] = meta.get("labels") or {}
    ctx = make_ctx(req, obj, bundle, namespace, keys)
    # Policies that decide the pod act on UPDATE only where it changes what new pods get: a
    # changed pod template of a kind whose template may change (never a Pod's or Job's spec).
    pod_update = ctx.operation == "UPDATE" and not (
        ctx.shape is not None and ctx.shape.template_mutable
        and ctx.shape.template_changed(obj, req.get("oldObject")))

    if resize:
        return _resized(decision, ctx, obj, bundle, labels)

    draft = Draft(obj)
    if phase in ("mutate", "check"):
        done: list[Policy] = []
        for policy in bundle.candidates(mutating=True, operation=ctx.operation, group=ctx.group,
                                        version=ctx.version, kind=ctx.kind):
            if (pod_update and policy.rule.decides_pod) or not (
                    (policy.match.subject_free and policy.exclude is None) or _applies(policy, ctx, labels)):
                continue
            if over_budget is not None and over_budget():
                _fail(policy, decision, "was not run: the review ran out of its time budget", "timeout")
                continue
            # the run inlined (9 mutating policies on a Pod: 10k instructions a review)
            edits = draft.edits
            try:
                findings = policy.rule.mutate(policy.settings, draft, ctx)  # type: ignore[misc]
            except Exception as e:
                _raised(policy, decision, e)
                _replay(done, ctx, draft)
                continue
            if findings:
                _record(policy, decision, findings, mutated=draft.edits != edits)
            else:
                decision.outcomes.append((policy.name, "mutated" if draft.edits != edits else "passed"))
            done.append(policy)
        if ctx.shape is not None and ctx.operation in ("CREATE", "UPDATE"):
            _seal_template(decision, ctx, draft, keys, labels, over_budget)
        decision.patch = draft.patch()
    if phase in ("validate", "check") and decision.allowed:
        root = draft.root
        for policy in bundle.candidates(mutating=False, operation=ctx.operation, group=ctx.group,
                                        version=ctx.version, kind=ctx.kind):
            if (pod_update and policy.rule.decides_pod) or not (
                    (policy.match.subject_free and policy.exclude is None) or _applies(policy, ctx, labels)):
                continue
            if over_budget is not None and over_budget():
                _fail(policy, decision, "was not run: the review ran out of its time budget", "timeout")
                continue
            # as the mutating loop: the run inlined, a pass recorded without a call (8 policies)
            try:
                findings = policy.rule.validate(policy.settings, root, ctx)  # type: ignore[misc]
            except Exception as e:
                _raised(policy, decision, e)
                continue
            if findings:
                _record(policy, decision, findings, mutated=False)
            else:
                decision.outcomes.append((policy.name, "passed"))
    decision.obj = draft.root
    if decision.denials and ctx.unsealed:
        decision.denials.append(_unsealed_note(ctx, obj))
    if decision.denials:
        decision.allowed = False
        decision.patch = []
    return decision


def _resized(decision: Decision, ctx: Ctx, obj: dict[str, Any], bundle: Bundle, labels: dict[str, str]) -> Decision:
    """An UPDATE through a Pod's ``pods/resize`` subresource: judged by the policies that judge one
    (``RuleType.resize``), with their match and failure mode as on any UPDATE of a Pod; no patch."""
    if ctx.kind != "Pod" or ctx.group:
        decision.skipped = "subresource resize of a kind that is not a Pod"
        return decision
    for policy in bundle.candidates(mutating=False, operation="UPDATE", group="", version=ctx.version, kind="Pod"):
        judge = policy.rule.resize
        if judge is None or not _applies(policy, ctx, labels):
            continue
        try:
            findings = judge(policy.settings, obj, ctx)
        except Exception as e:
            _raised(policy, decision, e)
            continue
        if findings:
            _record(policy, decision, findings, mutated=False)
        else:
            decision.outcomes.append((policy.name, "passed"))
    decision.obj = obj
    decision.allowed = not decision.denials
    return decision


def parse_request(body: object) -> AdmissionRequest:
    """The request of an AdmissionReview v1 body, checked field by field (BadReview otherwise)."""
    if not isinstance(body, dict):
        raise BadReview("body must be a JSON object (an AdmissionReview)")
    if body.get("kind") != "AdmissionReview":
        raise BadReview(f"kind must be AdmissionReview, got {body.get('kind')!r}")
    if body.get("apiVersion") != "admission.k8s.io/v1":
        raise BadReview(
            f"apiVersion must be admission.k8s.io/v1, got {body.get('apiVersion')!r} "
            "(set admissionReviewVersions: [v1] in the webhook configuration)"
        )
    req = body.get("request")
    if not isinstance(req, dict):
        raise BadReview("request is missing or not an object")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid is missing or empty")
    kind = req.get("kind")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str) or not kind["kind"]:
        raise BadReview("request.kind must be an object with group, version and kind")
    for key in ("group", "version", "kind"):
        value = kind.get(key)
        if value is not None and not isinstance(value, str):
            raise BadReview(f"request.kind.{key} must be a string, got {type(value).__name__}")
        if value is not None and len(value) > MAX_NAME:
            raise BadReview(f"request.kind.{key} is longer than {MAX_NAME} characters")
    sub = req.get("subResource")
    if sub is not None and not isinstance(sub, str):
        raise BadReview("request.subResource must be a string")
    if req.get("operation") not in OPERATIONS:
        raise BadReview(f"request.operation must be one of {', '.join(OPERATIONS)}, got {req.get('operation')!r}")
    for key in ("object", "oldObject"):
        if req.get(key) is not None and not isinstance(req[key], dict):
            raise BadReview(f"request.{key} must be an object or null")
    if req.get("object") is None and req["operation"] in ("CREATE", "UPDATE"):
        raise BadReview(f"request.object is required for {req['operation']}")
    user = req.get("userInfo")
    if user is not None:
        if not isinstance(user, dict):
            raise BadReview("request.userInfo must be an object")
        if user.get("username") is not None and not isinstance(user["username"], str):
            raise BadReview("request.userInfo.username must be a string")
        groups = user.get("groups")
        if groups is not None and not _strings(groups):
            raise BadReview("request.userInfo.groups must be a list of strings")
    for key in ("namespace", "name"):
        if req.get(key) is not None and not isinstance(req[key], str):
            raise BadReview(f"request.{key} must be a string")
    checked: AdmissionRequest = req  # type: ignore[assignment]  # every field the engine reads is checked above (cast() is a call)
    return checked


def _strings(value: object) -> bool:
    if not isinstance(value, list):
        return False
    for v in value:  # noqa: SIM110 (all() over a generator costs ~2k instructions more; every review)
        if not isinstance(v, str):
            return False
    return True


def _string_map(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


# What policies read in a pod spec, by the JSON type Kubernetes gives it (paths under the spec).
POD_SPEC_FIELDS: tuple[tuple[Path, str], ...] = (
    (("nodeSelector",), "string map"),
    (("overhead",), "quantities"),
    (("affinity",), "object"),
    (("affinity", "nodeAffinity"), "object"),
    (("affinity", "nodeAffinity", REQUIRED), "object"),
    (("affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms"), "objects"),
    (("affinity", "podAffinity"), "object"),
    (("affinity", "podAffinity", REQUIRED), "objects"),
    (("affinity", "podAntiAffinity"), "object"),
    (("affinity", "podAntiAffinity", REQUIRED), "objects"),
    *(((key,), "string") for key in ("priorityClassName", "runtimeClassName", "serviceAccountName",
                                     "serviceAccount", "schedulerName")),
    (("volumes",), "objects"),
)
CONTAINER_FIELDS: tuple[tuple[Path, str], ...] = (
    (("name",), "string"),
    (("resources",), "object"),
    (("resources", "limits"), "quantities"),
    (("resources", "requests"), "quantities"),
    (("volumeMounts",), "objects"),
)
NODE_TERM_FIELDS: tuple[tuple[Path, str], ...] = ((("matchExpressions",), "objects"), (("matchFields",), "objects"))
POD_TERM_FIELDS: tuple[tuple[Path, str], ...] = (
    (("labelSelector",), "object"),
    (("labelSelector", "matchLabels"), "string map"),
    (("labelSelector", "matchExpressions"), "objects"),
    (("namespaceSelector",), "object"),
    (("topologyKey",), "string"),
)
# Lists of objects in a pod spec whose items policies read, and what they read in each item.
POD_SPEC_ITEMS: tuple[tuple[Path, tuple[tuple[Path, str], ...]], ...] = (
    (("affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms"), NODE_TERM_FIELDS),
    (("affinity", "podAffinity", REQUIRED), POD_TERM_FIELDS),
    (("affinity", "podAntiAffinity", REQUIRED), POD_TERM_FIELDS),
)
MOUNT_FIELDS: tuple[tuple[Path, str], ...] = ((("name",), "string"), (("mountPath",), "string"))
VOLUME_FIELDS: tuple[tuple[Path, str], ...] = ((("name",), "string"),)
CHECKS: dict[str, tuple[Callable[[object], bool], str]] = {
    "object": (lambda v: isinstance(v, dict), "must be an object"),
    "objects": (lambda v: isinstance(v, list) and all(isinstance(i, dict) for i in v), "must be a list of objects"),
    "string": (lambda v: isinstance(v, str), "must be a string"),
    "string map": (lambda v: _string_map(v), "must map strings to strings"),
    "quantities": (lambda v: isinstance(v, dict) and all(_quantity(q) for q in v.values()),
                   "must map resource names to quantities (strings or numbers, e.g. 500m, 2, 4Gi)"),
}


def _by_first_key(fields: tuple[tuple[Path, str], ...]) -> dict[Any, list[tuple[Path, str]]]:
    out: dict[Any, list[tuple[Path, str]]] = {}
    for path, kind in fields:  # in order: a parent is checked before its children
        out.setdefault(path[0], []).append((path[1:], kind))
    return out


_BY_FIRST_KEY = {id(t): _by_first_key(t) for t in (
    POD_SPEC_FIELDS, CONTAINER_FIELDS, NODE_TERM_FIELDS, POD_TERM_FIELDS, MOUNT_FIELDS, VOLUME_FIELDS)}


def _quantity(value: object) -> bool:
    """A quantity's JSON type; whether it parses (and is sane) is each policy's to say."""
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def check_shape(obj: dict[str, Any], shape: Shape | None, where: str) -> None:
    """The structure every policy may rely on, as the API server's own decoding would enforce
    it: objects where Kubernetes has objects, lists of objects where it has lists, strings,
    labels and annotations mapping strings to strings, resources holding quantities. Anything
    else is a BadReview naming the field; only the fields policies read are looked at."""
    spec = _shape_ok(obj, shape)
    if spec is not None:  # the common case, checked in one pass; the affinity's checks follow
        affinity = spec.get("affinity") if spec is not True else None
        if affinity is not None and shape is not None and not _affinity_ok(affinity):
            _check_fields({"affinity": affinity}, shape.pod_spec, POD_SPEC_FIELDS, where)
            for path, fields in POD_SPEC_ITEMS:
                for i, item in enumerate(dig(spec, path) or []):
                    _check_fields(item, (*shape.pod_spec, *path, i), fields, where)
        return
    _check_meta(obj, ("metadata",), where)
    if shape is None:
        return
    if not shape.is_pod:
        _objects_on_the_way(obj, shape.pod_meta, where)
        _check_meta(obj, shape.pod_meta, where)
        if shape.kind == "CronJob":  # the Job template's own metadata is read too
            _check_meta(obj, ("spec", "jobTemplate", "metadata"), where)
    spec = _objects_on_the_way(obj, shape.pod_spec, where)
    if spec is None:
        return
    _check_fields(spec, shape.pod_spec, POD_SPEC_FIELDS, where)
    for key in ("initContainers", "containers", "ephemeralContainers"):
        containers = _list_of_objects(spec, (*shape.pod_spec, key), where)
        if not all(_container_ok(c) for c in containers):  # the fast path; on a miss, say where
            for i, c in enumerate(containers):
                _check_fields(c, (*shape.pod_spec, key, i), CONTAINER_FIELDS, where)
                for j, m in enumerate(c.get("volumeMounts") or []):
                    _check_fields(m, (*shape.pod_spec, key, i, "volumeMounts", j), MOUNT_FIELDS, where)
    for i, v in enumerate(spec.get("volumes") or []):
        _check_fields(v, (*shape.pod_spec, "volumes", i), VOLUME_FIELDS, where)
    for path, fields in POD_SPEC_ITEMS:
        for i, item in enumerate(dig(spec, path) or []):
            _check_fields(item, (*shape.pod_spec, *path, i), fields, where)


_SCALARS = (str, int, float)
_SPEC_STRINGS = ("priorityClassName", "runtimeClassName", "serviceAccountName", "serviceAccount", "schedulerName")
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def _shape_ok(obj: dict[str, Any], shape: Shape | None) -> Any:
    """check_shape's common case without building a path or a message: the pod spec (True
    where there is none) when every field check_shape reads is right, the affinity aside;
    None at the first doubt, and then check_shape's full walk says what is wrong. Exact
    types only (``__class__ is``): a subclass is a doubt, never a pass the walk would refuse."""
    if not _meta_ok(obj.get("metadata")):
        return None
    if shape is None:
        return True
    node: Any = obj
    if not shape.is_pod:
        for key in shape.pod_meta:
            node = node.get(key)
            if node is None:
                break
            if node.__class__ is not dict:
                return None
        if node is not None and not _meta_ok(node):
            return None
        if shape.kind == "CronJob":
            template = dig(obj, ("spec", "jobTemplate"))
            if template is not None and not _meta_ok(template.get("metadata")):
                return None
    spec: Any = obj
    for key in shape.pod_spec:
        spec = spec.get(key)
        if spec is None:
            return True
        if spec.__class__ is not dict:
            return None
    selector = spec.get("nodeSelector")
    if selector is not None:
        if selector.__class__ is not dict:
            return None
        for v in selector.values():
            if v.__class__ is not str:
                return None
    overhead = spec.get("overhead")
    if overhead is not None:
        if overhead.__class__ is not dict:
            return None
        for v in overhead.values():
            if v.__class__ not in _SCALARS:
                return None
    for key in _SPEC_STRINGS:
        value = spec.get(key)
        if value is not None and value.__class__ is not str:
            return None
    volumes = spec.get("volumes")
    if volumes is not None:
        if volumes.__class__ is not list:
            return None
        for v in volumes:
            if v.__class__ is not dict:
                return None
            name = v.get("name")
            if name is not None and name.__class__ is not str:
                return None
    for key in _CONTAINER_LISTS:
        containers = spec.get(key)
        if containers is not None:
            if containers.__class__ is not list:
                return None
            for c in containers:
                if c.__class__ is not dict or not _container_ok(c):
                    return None
    return spec


def _affinity_ok(affinity: Any) -> bool:
    """check_shape's checks under ``affinity`` (POD_SPEC_FIELDS and POD_SPEC_ITEMS there) in one
    pass, as _shape_ok: True when the walk would find nothing, False at the first doubt (then the
    walk says what is wrong). A time-limited Pod batchgate mutated carries the maintenance
    affinity, so the validating review of most Pod creates reads one (bench/README.md)."""
    if affinity.__class__ is not dict:
        return False
    node = affinity.get("nodeAffinity")
    if node is not None:
        if node.__class__ is not dict:
            return False
        required = node.get(REQUIRED)
        if required is not None:
            if required.__class__ is not dict:
                return False
            terms = required.get("nodeSelectorTerms")
            if terms is not None:
                if terms.__class__ is not list:
                    return False
                for term in terms:
                    if term.__class__ is not dict:
                        return False
                    for key in ("matchExpressions", "matchFields"):
                        value = term.get(key)
                        if value is not None and not _dicts(value):
                            return False
    for key in ("podAffinity", "podAntiAffinity"):
        pods = affinity.get(key)
        if pods is not None:
            if pods.__class__ is not dict:
                return False
            terms = pods.get(REQUIRED)
            if terms is not None:
                if terms.__class__ is not list:
                    return False
                for term in terms:
                    if term.__class__ is not dict or not _pod_term_ok(term):
                        return False
    return True


def _pod_term_ok(term: dict[str, Any]) -> bool:
    """POD_TERM_FIELDS on one pod (anti-)affinity term, as _affinity_ok."""
    selector = term.get("labelSelector")
    if selector is not None:
        if selector.__class__ is not dict:
            return False
        labels = selector.get("matchLabels")
        if labels is not None:
            if labels.__class__ is not dict:
                return False
            for v in labels.values():
                if v.__class__ is not str:
                    return False
        expressions = selector.get("matchExpressions")
        if expressions is not None and not _dicts(expressions):
            return False
    namespaces = term.get("namespaceSelector")
    if namespaces is not None and namespaces.__class__ is not dict:
        return False
    topology = term.get("topologyKey")
    return topology is None or topology.__class__ is str


def _dicts(value: Any) -> bool:
    """A list of objects (exact types)."""
    if value.__class__ is not list:
        return False
    for item in value:  # noqa: SIM110 (all() over a generator costs ~2k instructions more)
        if item.__class__ is not dict:
            return False
    return True


def _meta_ok(meta: Any) -> bool:
    """_check_meta's checks on one metadata object (None: nothing to check)."""
    if meta is None:
        return True
    if meta.__class__ is not dict:
        return False
    # Loops, not all() over a generator: a generator costs ~2k instructions to start, and
    # this runs on every review.
    for key in ("labels", "annotations"):
        m = meta.get(key)
        if m is not None:
            if m.__class__ is not dict:
                return False
            for v in m.values():
                if v.__class__ is not str:
                    return False
    for key in ("name", "namespace", "generateName"):
        v = meta.get(key)
        if v is not None and v.__class__ is not str:
            return False
    owners = meta.get("ownerReferences")
    if owners is not None:
        if owners.__class__ is not list:
            return False
        for o in owners:
            if o.__class__ is not dict:
                return False
    return True


def _container_ok(c: dict[str, Any]) -> bool:
    """CONTAINER_FIELDS and MOUNT_FIELDS for one container, inlined: a review may carry
    thousands of containers, and this runs inside its time budget."""
    name = c.get("name")
    if name is not None and name.__class__ is not str:
        return False
    res = c.get("resources")
    if res is not None:
        if res.__class__ is not dict:
            return False
        for part in (res.get("limits"), res.get("requests")):
            if part is not None:
                if part.__class__ is not dict:
                    return False
                for v in part.values():
                    if v.__class__ not in _SCALARS:
                        return False
    mounts = c.get("volumeMounts")
    if mounts is not None:
        if mounts.__class__ is not list:
            return False
        for m in mounts:
            if m.__class__ is not dict:
                return False
            for k in ("name", "mountPath"):
                v = m.get(k)
                if v is not None and v.__class__ is not str:
                    return False
    return True


def _check_fields(node: dict[str, Any], at: Path, fields: tuple[tuple[Path, str], ...], where: str) -> None:
    by_key = _BY_FIRST_KEY[id(fields)]
    for key in node.keys() & by_key.keys():  # most fields are absent: skip them in C
        top = node[key]
        for rest, kind in by_key[key]:
            value = dig(top, rest) if rest else top
            if value is not None:
                ok, problem = CHECKS[kind]
                if not ok(value):
                    _bad(where, (*at, key, *rest), problem)


def _check_meta(obj: dict[str, Any], path: Path, where: str) -> None:
    meta = dig(obj, path)
    if meta is None:
        return
    if not isinstance(meta, dict):
        _bad(where, path, "must be an object")
    for key in ("labels", "annotations"):
        if meta.get(key) is not None and not _string_map(meta[key]):
            _bad(where, (*path, key), "must map strings to strings")
    for key in ("name", "namespace", "generateName"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            _bad(where, (*path, key), "must be a string")
    _list_of_objects(meta, (*path, "ownerReferences"), where)


def _objects_on_the_way(obj: dict[str, Any], path: Path, where: str) -> dict[str, Any] | None:
    """The object at ``path``; None where the path ends early; BadReview where a step is not an object."""
    node: dict[Any, Any] = obj
    for i, key in enumerate(path):
        step = node.get(key) if isinstance(key, str) else None
        if step is None:
            return None
        if not isinstance(step, dict):
            _bad(where, path[: i + 1], "must be an object")
        node = step
    return node


def _list_of_objects(parent: dict[str, Any], path: Path, where: str) -> list[dict[str, Any]]:
    """The list at ``path`` (its last key in ``parent``); BadReview unless it holds objects only."""
    value = parent.get(str(path[-1]))
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        _bad(where, path, "must be a list of objects")
    return value


def _bad(where: str, path: Path, problem: str) -> NoReturn:
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    raise BadReview(f"{where}{field} {problem}")


def make_ctx(req: AdmissionRequest, obj: dict[str, Any], bundle: Bundle, namespace: str,
             keys: Keyring = OFFLINE) -> Ctx:
    """What the policies get to see of a request whose shape :func:`check_shape` passed."""
    kind = req["kind"]
    group, version, kind_name = kind.get("group") or "", kind.get("version") or "", kind["kind"]
    shape = shape_of(group, kind_name)
    meta: dict[str, Any] = obj.get("metadata") or {}
    user = req.get("userInfo") or {}
    username = user.get("username") or ""
    groups = tuple(user.get("groups") or ())

    queue_name, explicit = bundle.queue_for(group, kind_name, requested_queue(obj, shape), namespace)
    # A Pod, or a workload (a Deployment's ReplicaSet, a CronJob's Job), that a controller made
    # from a template already admitted as its owner.
    owners = meta.get("ownerReferences")
    from_controller = shape is not None and bool(owners) and bundle.made_by_controller(owners, username, groups)
    # Trusted as already judged only when made from a template this webhook sealed; else judged
    # with no one's grants: what anyone in the namespace may do (webhook.seal).
    trusted = from_controller
    if from_controller and shape is not None and made_from_template(obj):
        trusted = sealed(keys, obj, shape, namespace) or (
            bundle.unsealed_trusted and SEAL_ANNOTATION not in (shape.template(obj)[0].get("annotations") or {}))
        if not trusted:
            username, groups = "", ("system:authenticated",)

    return Ctx(  # by position, in _CTX_FIELDS' order (see there)
        req["operation"],
        group,
        version,
        kind_name,
        namespace,
        req.get("name") or meta.get("name") or "",  # name
        username,
        groups,
        bool(req.get("dryRun")),  # dry_run
        bundle,
        shape,
        queue_name,
        bundle.queues.get(queue_name),  # queue
        explicit,  # queue_explicit
        bundle.namespace_rule(namespace),
        bundle.admins.contains(username, groups),  # admin
        from_controller,
        req.get("oldObject"),  # old_object
        trusted,
        from_controller and not trusted,  # unsealed
    )


# make_ctx passes Ctx's fields by position, in this order: 21 keyword arguments would cost a
# third of building the context.
# The check fails at import when Ctx's fields change, so the two cannot drift apart.
_CTX_FIELDS = ("operation", "group", "version", "kind", "namespace", "name", "username", "groups", "dry_run",
               "bundle", "shape", "queue_name", "queue", "queue_explicit", "namespace_rule", "admin",
               "from_controller", "old_object", "trusted", "unsealed")
if tuple(f.name for f in dataclasses.fields(Ctx))[: len(_CTX_FIELDS)] != _CTX_FIELDS:
    raise ImportError("webhook.engine.make_ctx builds Ctx by position: update it with Ctx's fields")


def _seal_template(decision: Decision, ctx: Ctx, draft: Draft, keys: Keyring, labels: dict[str, str],
                   over_budget: Callable[[], bool] | None) -> None:
    """Seal the pod template when this request had it judged as its writer (a CREATE, an UPDATE
    that changes it) and the checks that depend on who asks pass on it (the validating webhook's
    own verdict may never come: UPDATE admission fails open); else take away any seal it carries.
    A Pod carries no seal of its own making: one in a user's Pod is removed; one in a controller's
    Pod is its template's."""
    shape = ctx.shape
    assert shape is not None
    if shape.is_pod:
        if not ctx.from_controller:
            # check_shape made the metadata and its annotations objects (or absent)
            meta = draft.root.get("metadata") or {}
            if (meta.get("annotations") or {}).get(SEAL_ANNOTATION) is not None:
                draft.delete("metadata", "annotations", SEAL_ANNOTATION)
        return
    where = (*shape.pod_meta, "annotations")
    annotations = draft.get(*where)
    current = annotations.get(SEAL_ANNOTATION) if isinstance(annotations, dict) else None
    bundle = ctx.bundle
    if ctx.from_controller or bundle.controllers.contains(ctx.username, ctx.groups):
        return  # not the template's writer: what it carries stays (a controller compares templates)
    checks = [p for p in bundle.candidates(mutating=False, operation=ctx.operation, group=ctx.group,
                                           version=ctx.version, kind=ctx.kind) if p.rule.sealed_check]
    if not checks:
        return  # a bundle with no check that a seal would stand for
    old = ctx.old_object
    old_judged = True
    if ctx.operation == "UPDATE":
        if not shape.template_mutable or not shape.template_changed(draft.root, old):
            return  # not judged in this request (a Job's template is immutable): its seal stays
        old_judged = old is not None and sealed(keys, old, shape, ctx.namespace)
    value = None
    if not decision.denials and not decision.errors and _passes(checks, ctx, draft, labels, old_judged,
                                                                over_budget):
        data = projection(draft.root, shape, ctx.namespace)
        value = seal(keys, data) if data is not None else None
    if value is not None and value != current:
        draft.set(*where, SEAL_ANNOTATION, value)
    elif value is None and current is not None:
        draft.delete(*where, SEAL_ANNOTATION)


def _passes(checks: list[Policy], ctx: Ctx, draft: Draft, labels: dict[str, str], old_judged: bool,
            over_budget: Callable[[], bool] | None) -> bool:
    """The validating checks that a controller's pods skip when sealed (RuleType.sealed_check)
    pass on the mutated template, for this caller. An UPDATE of a template that was never judged
    (not sealed) is judged whole, not only for what it adds."""
    jctx = ctx if old_judged else dataclasses.replace(ctx, old_judged=False)
    for policy in checks:
        if not _applies(policy, jctx, labels):
            continue
        if over_budget is not None and over_budget():
            return False
        assert policy.rule.validate is not None
        try:
            findings = policy.rule.validate(policy.settings, draft.root, jctx)
        except Exception:
            return False
        if any(f.severity == "deny" for f in findings):
            return False
    return True


def _unsealed_note(ctx: Ctx, obj: dict[str, Any]) -> str:
    ref = next((o for o in (obj.get("metadata") or {}).get("ownerReferences") or ()
                if isinstance(o, dict) and o.get("controller") is True), {})
    owner = f"{ref.get('kind') or 'owner'} {ctx.namespace}/{ref.get('name') or '?'}"
    return (f"{SEAL_ANNOTATION}: this {ctx.kind} was made by a controller for {owner} from a pod "
            f"template that batchgate did not admit as it is (no valid {SEAL_ANNOTATION} seal: the "
            "template was changed while the webhook was unreachable, by a kind batchgate does not "
            "judge, or before batchgate sealed templates), so it was judged with no one's grants; "
            "whoever may use what it asks for should update its pod template while the webhook is up "
            "(kubectl apply, or kubectl rollout restart) so that batchgate judges it")


def _applies(policy: Policy, ctx: Ctx, labels: dict[str, str]) -> bool:
    """The rest of the match (kind and operation: Bundle.candidates)."""
    m = policy.match
    if m.subject_free and policy.exclude is None:  # most policies: nothing more to check
        return True
    if not m.matches_subject(ctx.namespace, labels, ctx.username, ctx.groups):
        return False
    ex = policy.exclude
    if ex is None:
        return True
    if ex.operations and ctx.operation not in ex.operations:
        return True
    if ex.kinds and not ex.matches_kind(ctx.group, ctx.version, ctx.kind):
        return True
    return not ex.matches_subject(ctx.namespace, labels, ctx.username, ctx.groups)


def _replay(done: list[Policy], ctx: Ctx, draft: Draft) -> None:
    """Drop a failed policy's half-made edits: rules are pure functions of the
    request, so re-running the ones that succeeded rebuilds exactly their edits.
    Costs nothing on the normal path (no snapshot per policy)."""
    draft.reset()
    for policy in done:
        assert policy.rule.mutate is not None
        policy.rule.mutate(policy.settings, draft, ctx)


def _fail(policy: Policy, decision: Decision, what: str, outcome: str) -> None:
    """The policy's failure mode: deny (Fail) or skip with a warning (Ignore)."""
    decision.outcomes.append((policy.name, outcome))
    if policy.failure_policy == "Fail":
        decision.denials.append(
            f"{policy.name}: the policy {what} and fails closed; ask an admin to check the webhook logs (uid {decision.uid})"
        )
    else:
        decision.warnings.append(f"{policy.name}: skipped, the policy {what} (uid {decision.uid})")


def _raised(policy: Policy, decision: Decision, error: Exception) -> None:
    """A policy raised (called while handling ``error``): its failure mode."""
    if isinstance(error, OutOfBudget):
        _fail(policy, decision, "ran out of the review's time budget", "timeout")
    else:
        decision.errors.append((policy.name, traceback.format_exc()))
        _fail(policy, decision, "failed internally", "error")


def _record(policy: Policy, decision: Decision, findings: list[Finding], *, mutated: bool) -> None:
    denied = False
    for f in findings:
        if f.severity == "deny":
            denied = True
            decision.denials.append(f"{policy.name}: {f.message}")
        else:
            decision.warnings.append(f"{policy.name}: {f.message}")
    outcome = "denied" if denied else "mutated" if mutated else "warned" if findings else "passed"
    decision.outcomes.append((policy.name, outcome))
