"""The admission seal (webhook.seal) and how the engine writes and trusts it: the canonical
projection, the MAC, verification, missing / forged / copied seals, key rotation, the key file, and
the engine paths (a CREATE seals, an UPDATE that changes the template re-seals, a template changed
without admission makes controllers' objects be judged with no one's grants, a forged seal in a
user's request never survives, a controller's object keeps its template's seal)."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from tests.unit.conftest import decided, sealed, shipped_bundle, workload
from webhook.engine import decide
from webhook.offline import Caller, synthetic_review
from webhook.seal import (
    MIN_KEY_BYTES,
    OFFLINE,
    Keyring,
    SealKeyError,
    parse_keyring,
    projection,
    seal,
    verifies,
)
from webhook.workloads import shape_of

SEAL = "batchgate.io/admitted"
QUEUE = "batchgate.io/queue"
POD = shape_of("", "Pod")
DEPLOYMENT = shape_of("apps", "Deployment")
CM = ("system:kube-controller-manager", ("system:authenticated",))
ALICE = ("alice", ("devs", "system:authenticated"))
BOB = ("bob", ("batchgate:admins", "system:authenticated"))
K1 = ("k1", b"1" * 32)
K2 = ("k2", b"2" * 32)


def controller_pod(*, cls: str = "batchgate-batch", queue: str = "batch", owner: str = "ReplicaSet",
                   annotations: dict[str, str] | None = None) -> dict[str, Any]:
    api = "batch/v1" if owner == "Job" else "apps/v1"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": "w-", "namespace": "demo", "labels": {QUEUE: queue, "app": "w"},
        "annotations": dict(annotations or {}),
        "ownerReferences": [{"apiVersion": api, "kind": owner, "name": "w-1", "uid": "u", "controller": True}]},
        "spec": {"priorityClassName": cls, "containers": [{"name": "c", "image": "busybox"}]}}


def run(obj: dict[str, Any], who: tuple[str, tuple[str, ...]], *, op: str = "CREATE", old: Any = None,
        keys: Keyring = OFFLINE, bundle: Any = None, phase: str = "check", ns: str = "demo") -> Any:
    review = synthetic_review(obj, Caller(operation=op, username=who[0], groups=who[1], namespace=ns), old_object=old)
    if keys is OFFLINE and phase == "check":
        return decided(review, bundle or shipped_bundle())
    return decide(review, bundle or shipped_bundle(), phase=phase, keys=keys)  # type: ignore[arg-type]


# -- the projection ------------------------------------------------------------------------
def test_projection_covers_exactly_the_judged_fields():
    assert POD is not None
    base = controller_pod(annotations={"batchgate.io/time-limit": "4h"})
    data = projection(base, POD, "demo")
    for change in (lambda o: o["metadata"]["labels"].__setitem__(QUEUE, "interactive"),
                   lambda o: o["metadata"]["labels"].__setitem__("batchgate.io/exclusive", "true"),
                   lambda o: o["metadata"]["annotations"].__setitem__("batchgate.io/time-limit", "5h"),
                   lambda o: o["spec"].__setitem__("priorityClassName", "batchgate-urgent"),
                   lambda o: o["spec"].pop("priorityClassName")):
        other = copy.deepcopy(base)
        change(other)
        assert projection(other, POD, "demo") != data
    assert projection(base, POD, "other") != data
    # what controllers and admission plugins add is not covered
    other = copy.deepcopy(base)
    other["metadata"]["labels"]["pod-template-hash"] = "abc"
    other["metadata"]["annotations"]["note"] = "x"
    other["spec"]["tolerations"] = [{"key": "k", "operator": "Exists"}]
    other["spec"]["serviceAccountName"] = "default"
    assert projection(other, POD, "demo") == data


def test_projection_is_unambiguous():
    assert POD is not None
    a, b = controller_pod(), controller_pod()
    a["metadata"]["labels"][QUEUE] = "batch\n=x"
    b["metadata"]["labels"][QUEUE] = "batch"
    assert projection(a, POD, "demo") != projection(b, POD, "demo")
    c = controller_pod()
    c["spec"]["priorityClassName"] = 7  # a type the API server refuses; never equal to "7"
    d = controller_pod(cls="7")
    assert projection(c, POD, "demo") != projection(d, POD, "demo")


def test_a_made_workload_must_agree_with_its_template():
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"labels": {QUEUE: "batch"}},
          "spec": {"template": {"metadata": {"labels": {QUEUE: "batch"}}, "spec": {}}}}
    shape = shape_of("apps", "ReplicaSet")
    assert shape is not None and projection(rs, shape, "demo") is not None
    rs["metadata"]["labels"][QUEUE] = "interactive"  # its own label wins over its template's
    assert projection(rs, shape, "demo") is None
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"annotations": {"batchgate.io/time-limit": "9d"}},
           "spec": {"template": {"metadata": {"annotations": {"batchgate.io/time-limit": "1h"}}, "spec": {}}}}
    job_shape = shape_of("batch", "Job")
    assert job_shape is not None and projection(job, job_shape, "demo") is None


# -- the MAC, verification, rotation -------------------------------------------------------------
def test_seal_verifies_only_with_its_key_over_its_data():
    ring = Keyring((K1,))
    value = seal(ring, b"data")
    assert value.startswith("k1.") and verifies(ring, value, b"data")
    assert not verifies(ring, value, b"datA")
    assert not verifies(Keyring((("k1", b"x" * 32),)), value, b"data")  # same id, other secret
    assert not verifies(OFFLINE, value, b"data")
    for forged in (None, "", "k1", "k1.", value + "A", value[:-1], "k9" + value[2:], value.replace("k1.", ""), 3):
        assert not verifies(ring, forged, b"data"), forged
    assert not verifies(ring, value, None)


def test_rotation_signs_with_the_first_and_verifies_with_all():
    old = seal(Keyring((K1,)), b"d")
    both = Keyring((K2, K1))
    assert verifies(both, old, b"d") and seal(both, b"d").startswith("k2.")
    assert not verifies(Keyring((K2,)), old, b"d")  # the old key dropped: its seals are gone


def test_key_file():
    secret = base64.b64encode(b"s" * MIN_KEY_BYTES).decode()
    ring = parse_keyring(f"# comment\n\nnew {secret}\nold {base64.b64encode(b't' * 40).decode()}\n")
    assert ring.current == "new" and [k for k, _ in ring.keys] == ["new", "old"]
    for text, problem in ((f"a {secret}\na {secret}\n", "f:2: duplicate key id 'a'"),
                          ("a c2hvcnQ=\n", "f:1: key 'a' has 5 bytes; at least 32"),
                          ("a not*base64\n", "f:1: key 'a' is not base64"),
                          (f"a {secret} extra\n", "f:1: expected '<id> <base64 key>'"),
                          (f"-a {secret}\n", "f:1: key id '-a'"),
                          ("# only a comment\n", "f: no key")):
        with pytest.raises(SealKeyError, match=problem.replace("(", r"\(").replace("*", r"\*")):
            parse_keyring(text, "f")


# -- the engine: sealing what it admits -------------------------------------------------------
def template_seal(obj: dict[str, Any]) -> Any:
    return ((obj["spec"]["template"]["metadata"].get("annotations")) or {}).get(SEAL)


def test_create_seals_the_template_and_its_pods_verify():
    d = run(workload("Deployment"), ALICE)
    assert d.allowed and template_seal(d.obj) is not None
    assert d.obj == sealed(d.obj)  # the seal over the mutated template
    rs = copy.deepcopy(d.obj)
    rs["kind"] = "ReplicaSet"
    rs["metadata"] = {"name": "w-1", "namespace": "demo", "labels": dict(d.obj["spec"]["template"]["metadata"]["labels"]),
                      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "w", "uid": "u",
                                           "controller": True}]}
    made = run(rs, CM)
    assert made.allowed and made.patch == []  # trusted, left as its Deployment made it
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        **copy.deepcopy(rs["spec"]["template"]["metadata"]), "generateName": "w-1-", "namespace": "demo",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "w-1", "uid": "u2",
                             "controller": True}]}, "spec": copy.deepcopy(rs["spec"]["template"]["spec"])}
    assert run(pod, CM).allowed


def test_only_the_checks_passing_for_the_caller_seal():
    urgent = workload("Deployment", spec={"priorityClassName": "batchgate-urgent",
                                          "containers": [{"name": "c", "image": "busybox"}]})
    as_bob = run(urgent, BOB)
    assert as_bob.allowed and template_seal(as_bob.obj) is not None
    # the mutating webhook alone (its validating half unreachable) still does not seal for alice
    as_alice = run(urgent, ALICE, phase="mutate")
    assert as_alice.allowed and as_alice.obj is not None and template_seal(as_alice.obj) is None
    assert not run(urgent, ALICE).allowed


def test_a_forged_seal_in_a_request_never_survives():
    dep = workload("Deployment", spec={"priorityClassName": "batchgate-urgent",
                                       "containers": [{"name": "c", "image": "busybox"}]})
    dep["spec"]["template"]["metadata"]["annotations"] = {SEAL: "offline.forged"}
    d = run(dep, ALICE, phase="mutate")
    assert d.obj is not None and template_seal(d.obj) is None and {"op": "remove", "path":
        "/spec/template/metadata/annotations/batchgate.io~1admitted"} in d.patch
    ok = run(workload("Deployment"), ALICE)
    dep = workload("Deployment")
    dep["spec"]["template"]["metadata"]["annotations"] = {SEAL: template_seal(ok.obj)[:-2] + "xx"}
    assert template_seal(run(dep, ALICE).obj) == template_seal(ok.obj)  # replaced by the real one
    user_pod = controller_pod(annotations={SEAL: "offline.x"})
    del user_pod["metadata"]["ownerReferences"]
    d = run(user_pod, ALICE)
    assert SEAL not in (d.obj["metadata"].get("annotations") or {})


def test_controller_objects_from_unsealed_or_changed_templates_get_no_grants():
    assert run(sealed(controller_pod(cls="batchgate-urgent")), CM).allowed
    for pod in (controller_pod(cls="batchgate-urgent"),  # no seal (a ReplicationController's, an old one)
                # sealed as batch, then the template's class changed while the webhook was down
                {**sealed(controller_pod()), "spec": {"priorityClassName": "batchgate-urgent",
                                                      "containers": [{"name": "c", "image": "busybox"}]}},
                sealed(controller_pod(cls="batchgate-urgent"), namespace="elsewhere"),  # copied over
                sealed(controller_pod(cls="batchgate-urgent"), keys=Keyring((K1,)))):  # a key not ours
        d = run(pod, CM)
        assert not d.allowed
        assert "'batchgate-urgent' is reserved for admins" in d.message
        assert "no valid batchgate.io/admitted seal" in d.message
    # a ReplicationController is never sealed: its pods get no one's grants
    rc = controller_pod(cls="batchgate-urgent")
    rc["metadata"]["ownerReferences"][0].update(apiVersion="v1", kind="ReplicationController")
    assert "no valid batchgate.io/admitted seal" in run(rc, CM).message
    # an operator's custom resource is trusted as before (docs/admin/security.md: listed operators)
    cr = controller_pod(cls="batchgate-urgent")
    cr["metadata"]["ownerReferences"][0].update(apiVersion="kubeflow.org/v1", kind="MPIJob")
    assert run(cr, CM).allowed


def test_the_servers_keys_are_used():
    ring = Keyring((K1,))
    d = run(workload("Deployment"), ALICE, keys=ring, phase="mutate")
    value = template_seal(d.obj)
    assert value.startswith("k1.")
    pod = controller_pod()
    pod["metadata"]["annotations"][SEAL] = value
    pod["metadata"]["labels"] = dict(d.obj["spec"]["template"]["metadata"]["labels"])
    assert run(pod, CM, keys=ring, phase="validate").allowed
    pod["spec"]["priorityClassName"] = "batchgate-urgent"
    assert not run(pod, CM, keys=ring, phase="validate").allowed


def test_update_that_changes_the_template_is_sealed_anew_and_one_that_does_not_keeps_it():
    created = run(workload("Deployment"), ALICE).obj
    old_seal = template_seal(created)
    scaled = copy.deepcopy(created)
    scaled["spec"]["replicas"] = 3
    d = run(scaled, ALICE, op="UPDATE", old=created)
    assert d.patch == [] and template_seal(d.obj) == old_seal
    relabelled = copy.deepcopy(created)
    relabelled["metadata"]["labels"][QUEUE] = "interactive"
    relabelled["spec"]["template"]["metadata"]["labels"][QUEUE] = "interactive"
    relabelled["spec"]["template"]["spec"]["priorityClassName"] = "batchgate-interactive"
    d = run(relabelled, ALICE, op="UPDATE", old=created)
    assert d.allowed and template_seal(d.obj) not in (None, old_seal) and d.obj == sealed(d.obj)


def test_a_change_made_during_an_outage_is_not_laundered_by_a_later_update():
    """Outage: alice relabels the template into a queue closed to her (stored unjudged, old seal).
    A later UPDATE (a new container) adds no queue, so queue-access lets the UPDATE through as it
    always did; but the template was never judged whole: it gets no seal, and its pods none."""
    closed = _bundle_with_interactive_closed()
    created = run(workload("Deployment"), ALICE, bundle=closed).obj
    outage = copy.deepcopy(created)
    outage["spec"]["template"]["metadata"]["labels"][QUEUE] = "interactive"
    outage["spec"]["template"]["spec"]["priorityClassName"] = "batchgate-interactive"
    later = copy.deepcopy(outage)
    later["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "busybox"})
    d = run(later, ALICE, op="UPDATE", old=outage, bundle=closed, phase="mutate")
    assert d.obj is not None and template_seal(d.obj) is None
    # the same UPDATE of a template that had been judged (sealed) is sealed
    d = run(later, BOB, op="UPDATE", old=outage, bundle=closed, phase="mutate")
    assert d.obj is not None and template_seal(d.obj) is not None


def test_unsealed_trust_is_a_migration_setting_for_missing_seals_only():
    trusting = _bundle(unsealed="trust")
    assert run(controller_pod(cls="batchgate-urgent"), CM, bundle=trusting).allowed
    changed = {**sealed(controller_pod()), "spec": {"priorityClassName": "batchgate-urgent",
                                                    "containers": [{"name": "c", "image": "busybox"}]}}
    assert not run(changed, CM, bundle=trusting).allowed


def _bundle(**sealing: str) -> Any:
    import dataclasses

    return dataclasses.replace(shipped_bundle(), unsealed_trusted=sealing.get("unsealed") == "trust")


def _bundle_with_interactive_closed() -> Any:
    import dataclasses

    from webhook.bundle import Access, Grant

    b = shipped_bundle()
    queues = dict(b.queues)
    queues["interactive"] = dataclasses.replace(queues["interactive"], access=Access((Grant(groups=("hpc",)),)))
    return dataclasses.replace(b, queues=queues)


def test_the_mac_is_hmac_sha256():
    import hmac

    for secret in (b"k" * 32, b"long" * 40):  # a key longer than SHA-256's block is hashed first
        ring = Keyring((("a", secret),))
        want = base64.urlsafe_b64encode(hmac.digest(secret, b"some data", "sha256")).rstrip(b"=").decode()
        assert seal(ring, b"some data") == f"a.{want}"
