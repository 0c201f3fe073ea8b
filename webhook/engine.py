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
import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from .bundle import Bundle, Policy
from .draft import Draft
from .rules.base import Ctx, Finding
from .wire import AdmissionResponse, AdmissionReview, Operation
from .workloads import requested_queue, shape_of

Phase = Literal["mutate", "validate", "check"]  # which webhook asks; check: both, as `batchgate check`
PHASES: tuple[Phase, ...] = ("mutate", "validate", "check")
OPERATIONS: tuple[Operation, ...] = ("CREATE", "UPDATE", "DELETE", "CONNECT")
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


def review(body: Any, bundle: Bundle, *, phase: Phase) -> tuple[AdmissionReview, Decision]:
    """Answer one AdmissionReview; raises BadReview for a malformed one."""
    decision = decide(body, bundle, phase=phase)
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
    """
    if not decision.allowed:
        return dumps(to_review(decision))
    parts = [_HEAD, dumps(decision.uid), b',"allowed":true']
    if decision.patch:
        parts += (b',"patchType":"JSONPatch","patch":"',
                  base64.b64encode(dumps(decision.patch)), b'"')
    if decision.warnings:
        parts += (b',"warnings":', dumps(decision.warnings))
    parts.append(b"}}")
    return b"".join(parts)


def decide(body: Any, bundle: Bundle, *, phase: Phase,
           over_budget: Callable[[], bool] | None = None) -> Decision:
    """Run the bundle's policies on one review.

    ``over_budget`` is asked before each policy (the edge passes a clock-based
    check; the core reads no clock): once it says yes, every policy still to run
    answers with its failure mode instead of running, as if it had failed.
    """
    req = parse_request(body)
    decision = Decision(uid=req["uid"])
    operation = req["operation"]
    obj = req.get("object") if operation not in ("DELETE", "CONNECT") else req.get("oldObject")
    if req.get("subResource"):
        decision.skipped = f"subresource {req['subResource']}"
        return decision
    if not isinstance(obj, dict):
        decision.skipped = "no object"
        return decision
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise BadReview("request.object.metadata must be an object")
    meta = meta or {}
    namespace = req.get("namespace") or meta.get("namespace") or ""
    if not isinstance(namespace, str):
        raise BadReview("request.object.metadata.namespace must be a string")
    # Excluded namespaces are about the objects in them; a Namespace itself (its opt-out
    # label) is judged whatever its name.
    if namespace and bundle.excluded(namespace) and (req.get("kind") or {}).get("kind") != "Namespace":
        decision.skipped = f"namespace {namespace} is excluded"
        return decision
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        raise BadReview("request.object.metadata.labels must be an object")
    ctx = make_ctx(req, obj, bundle, namespace)
    # Policies that decide the pod act on UPDATE only where it changes what new pods get: a
    # changed pod template of a kind whose template may change (never a Pod's or Job's spec).
    pod_update = ctx.operation == "UPDATE" and not (
        ctx.shape is not None and ctx.shape.template_mutable
        and ctx.shape.template_changed(obj, req.get("oldObject")))

    draft = Draft(obj)
    if phase in ("mutate", "check"):
        done: list[Policy] = []
        for policy in bundle.candidates(mutating=True, operation=ctx.operation, group=ctx.group,
                                        version=ctx.version, kind=ctx.kind):
            if (pod_update and policy.rule.decides_pod) or not _applies(policy, ctx, labels):
                continue
            if over_budget is not None and over_budget():
                _fail(policy, decision, "was not run: the review ran out of its time budget", "timeout")
                continue
            if _run(policy, decision, ctx, draft, mutate=True):
                done.append(policy)
            else:
                _replay(done, ctx, draft)
        decision.patch = draft.patch()
    if phase in ("validate", "check") and decision.allowed:
        for policy in bundle.candidates(mutating=False, operation=ctx.operation, group=ctx.group,
                                        version=ctx.version, kind=ctx.kind):
            if (pod_update and policy.rule.decides_pod) or not _applies(policy, ctx, labels):
                continue
            if over_budget is not None and over_budget():
                _fail(policy, decision, "was not run: the review ran out of its time budget", "timeout")
            else:
                _run(policy, decision, ctx, draft, mutate=False)
    decision.obj = draft.root
    if decision.denials:
        decision.allowed = False
        decision.patch = []
    return decision


def parse_request(body: Any) -> dict[str, Any]:
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
        if groups is not None and (not isinstance(groups, list) or not all(isinstance(g, str) for g in groups)):
            raise BadReview("request.userInfo.groups must be a list of strings")
    for key in ("namespace", "name"):
        if req.get(key) is not None and not isinstance(req[key], str):
            raise BadReview(f"request.{key} must be a string")
    return req


def make_ctx(req: dict[str, Any], obj: dict[str, Any], bundle: Bundle, namespace: str) -> Ctx:
    kind = req["kind"]
    group, version, kind_name = kind.get("group") or "", kind.get("version") or "", kind["kind"]
    shape = shape_of(group, kind_name)
    meta = obj.get("metadata") or {}
    user = req.get("userInfo") or {}
    username = str(user.get("username") or "")
    groups = tuple(str(g) for g in user.get("groups") or ())

    queue_name, explicit = bundle.queue_for(group, kind_name, requested_queue(obj, shape), namespace)
    # A Pod, or a workload (a Deployment's ReplicaSet, a CronJob's Job), that a controller made
    # from a template already admitted as its owner.
    from_controller = shape is not None and bundle.made_by_controller(
        meta.get("ownerReferences") or [], username, groups)

    return Ctx(
        operation=req["operation"],
        group=group,
        version=version,
        kind=kind_name,
        namespace=namespace,
        name=req.get("name") or meta.get("name") or "",
        username=username,
        groups=groups,
        dry_run=bool(req.get("dryRun")),
        bundle=bundle,
        shape=shape,
        queue_name=queue_name,
        queue=bundle.queues.get(queue_name),
        queue_explicit=explicit,
        namespace_rule=bundle.namespace_rule(namespace),
        admin=bundle.admins.contains(username, groups),
        from_controller=from_controller,
        old_object=req.get("oldObject"),
    )


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


def _run(policy: Policy, decision: Decision, ctx: Ctx, draft: Draft, *, mutate: bool) -> bool:
    """Run one policy, record what it did; False when it raised."""
    edits = draft.edits
    try:
        if mutate:
            assert policy.rule.mutate is not None
            findings: list[Finding] = policy.rule.mutate(policy.settings, draft, ctx)
        else:
            assert policy.rule.validate is not None
            findings = policy.rule.validate(policy.settings, draft.root, ctx)
    except OutOfBudget:
        _fail(policy, decision, "ran out of the review's time budget", "timeout")
        return False
    except Exception:
        decision.errors.append((policy.name, traceback.format_exc()))
        _fail(policy, decision, "failed internally", "error")
        return False
    denied = False
    for f in findings:
        if f.severity == "deny":
            denied = True
            decision.denials.append(f"{policy.name}: {f.message}")
        else:
            decision.warnings.append(f"{policy.name}: {f.message}")
    if denied:
        outcome = "denied"
    elif mutate and draft.edits != edits:
        outcome = "mutated"
    elif findings:
        outcome = "warned"
    else:
        outcome = "passed"
    decision.outcomes.append((policy.name, outcome))
    return True
