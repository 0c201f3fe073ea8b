"""What every policy type's unit tests do the same way: decide an object as `batchgate check`
would, with jsonpatch as an independent oracle and a reinvocation that must not patch again;
load a sample; narrow the shipped bundle to some policies or give one other settings; and load
a policy whose settings are bad."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import POLICIES
from webhook.bundle import Bundle
from webhook.engine import Decision, decide
from webhook.offline import Caller, synthetic_review
from webhook.rules import load_bundle
from webhook.yamlsrc import BundleError


def checked_decide(bundle: Bundle, obj: dict[str, Any], caller: Caller) -> Decision:
    d = decide(synthetic_review(obj, caller), bundle, phase="check")
    assert d.errors == []
    if d.patch:
        assert jsonpatch.apply_patch(copy.deepcopy(obj), d.patch) == d.obj
        again = decide(synthetic_review(d.obj, caller), bundle, phase="mutate")
        assert again.patch == [], "a second pass must be a no-op"
    return d


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
