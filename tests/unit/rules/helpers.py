"""What every policy type's unit tests do the same way: decide an object as `batchgate check`
would, with jsonpatch as an independent oracle and a reinvocation that must not patch again;
load a sample; and load a policy whose settings are bad."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import POLICIES
from webhook.bundle import Bundle, load_bundle
from webhook.engine import Decision, decide
from webhook.offline import Caller, synthetic_review
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
