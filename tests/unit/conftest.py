"""What unit tests share (besides ``tests/conftest.py``: the fixtures, the shipped bundle).

Deciding: every test that decides a review goes through :func:`decided`, so jsonpatch is an
independent oracle for every patch (applied to the request's object it must give the object
the engine says it produced) and a reinvocation of the mutated object must not patch again.
:func:`checked_decide` is the same for an object as ``batchgate check`` would send it, and
:func:`check` for a workload of :func:`workload`'s making, as alice in ``demo``.

Bundles: :func:`only` narrows the shipped bundle to some policies, :func:`with_settings` gives
one shipped policy other settings, :func:`settings_error` loads a policy whose settings are bad.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import POLICIES
from webhook.bundle import Bundle
from webhook.engine import Decision, Phase, decide
from webhook.offline import Caller, synthetic_review
from webhook.rules import load_bundle
from webhook.seal import OFFLINE, Keyring, projection, seal
from webhook.workloads import shape_of
from webhook.yamlsrc import BundleError


# -- deciding, with the oracle ------------------------------------------------------------
def decided(review: dict[str, Any], bundle: Bundle, *, phase: Phase = "check") -> Decision:
    """``decide(review, bundle, phase=phase)``, its patch checked by jsonpatch and by a
    reinvocation on the mutated object (same request otherwise) that must patch nothing."""
    d = decide(review, bundle, phase=phase)
    if d.patch:
        sent = review["request"]["object"]
        assert jsonpatch.apply_patch(copy.deepcopy(sent), d.patch) == d.obj, \
            "the patch applied by jsonpatch differs from the engine's object"
        again = copy.deepcopy(review)
        again["request"]["object"] = d.obj
        assert decide(again, bundle, phase="mutate").patch == [], "a second pass must be a no-op"
    return d


def sealed(obj: dict[str, Any], namespace: str = "demo", keys: Keyring = OFFLINE) -> dict[str, Any]:
    """``obj`` (a Pod, or a workload's pod template) with the seal the webhook would have written on
    the template it came from: what a controller's copy of an admitted template carries."""
    group = str(obj.get("apiVersion") or "v1").rpartition("/")[0]
    shape = shape_of(group, obj["kind"])
    assert shape is not None
    out = copy.deepcopy(obj)
    data = projection(out, shape, namespace)
    assert data is not None
    meta = out
    for key in shape.pod_meta:
        meta = meta.setdefault(key, {})
    meta.setdefault("annotations", {})["batchgate.io/admitted"] = seal(keys, data)
    return out


def checked_decide(bundle: Bundle, obj: dict[str, Any], caller: Caller) -> Decision:
    """``batchgate check`` on ``obj`` as ``caller``, through the oracle; no policy may fail."""
    d = decided(synthetic_review(obj, caller), bundle)
    assert d.errors == []
    return d


SPEC = {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}


def workload(kind: str, *, name: str = "w", labels: dict[str, str] | None = None,
             spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Pod, Job, CronJob or apps workload whose pod template is ``spec`` (default: one
    container requesting 1 CPU, 1Gi) with ``labels`` (and ``app: name``)."""
    template = {"metadata": {"labels": {"app": name, **(labels or {})}}, "spec": copy.deepcopy(spec or SPEC)}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **template["metadata"]},
                "spec": template["spec"]}
    if kind in ("Job", "CronJob"):
        template["spec"]["restartPolicy"] = "Never"
        job = {"template": template}
        if kind == "Job":
            return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": job}
        return {"apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": {"name": name},
                "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": job}}}
    spec_ = {"selector": {"matchLabels": {"app": name}}, "template": template}
    if kind == "StatefulSet":
        spec_["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec_}


def check(obj: dict[str, Any], *, user: str = "alice", groups: tuple[str, ...] = ("system:authenticated",),
          namespace: str = "demo", operation: str = "CREATE", old: dict[str, Any] | None = None,
          bundle: Bundle | None = None) -> Decision:
    """``obj`` decided as ``batchgate check`` would (the shipped bundle unless ``bundle``)."""
    caller = Caller(operation=operation, username=user, groups=tuple(groups), namespace=namespace)
    return decided(synthetic_review(obj, caller, old_object=old), bundle or shipped_bundle())


@functools.cache
def shipped_bundle() -> Bundle:
    return load_bundle(POLICIES)


# -- samples and bundles ------------------------------------------------------------------
def load_sample(policy: str, name: str) -> dict[str, Any]:
    return yaml.safe_load((POLICIES / policy / "samples" / name).read_text())  # type: ignore[no-any-return]


def only(bundle: Bundle, *names: str) -> Bundle:
    """``bundle`` with only the named policies in force (each in the phases its type has)."""
    keep = tuple(p for p in bundle.policies if p.name in names)
    assert keep, f"test setup: no policy {', '.join(names)}"
    return dataclasses.replace(
        bundle, policies=keep,
        mutating=tuple(p for p in keep if p.rule.mutate is not None),
        validating=tuple(p for p in keep if p.rule.validate is not None),
    )


def with_settings(tmp_path: Path, policy: str, settings: dict[str, Any] | None) -> Bundle:
    """The shipped bundle.yaml plus the shipped policy ``policy`` alone, with ``settings`` in
    place of its own (None: its own)."""
    root = tmp_path / "bundle"
    (root / policy).mkdir(parents=True)
    (root / "bundle.yaml").write_text((POLICIES / "bundle.yaml").read_text())
    doc = yaml.safe_load((POLICIES / policy / "policy.yaml").read_text())
    if settings is not None:
        doc["spec"]["settings"] = settings
    (root / policy / "policy.yaml").write_text(yaml.safe_dump(doc))
    return load_bundle(root)


def settings_error(tmp_path: Path, policy_type: str, settings_yaml: str) -> BundleError:
    """The error of loading the shipped bundle.yaml plus one policy of ``policy_type`` whose
    ``spec.settings`` is ``settings_yaml`` (its first line is line 8 of policy.yaml)."""
    root = tmp_path / "bad"
    (root / policy_type).mkdir(parents=True)
    (root / "bundle.yaml").write_text((POLICIES / "bundle.yaml").read_text())
    (root / policy_type / "policy.yaml").write_text(
        f"apiVersion: batchgate.io/v1alpha1\nkind: Policy\nmetadata:\n  name: {policy_type}\n"
        f"spec:\n  type: {policy_type}\n  settings:\n" + settings_yaml
    )
    with pytest.raises(BundleError) as e:
        load_bundle(root)
    return e.value
