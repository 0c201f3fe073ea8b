"""`batchgate check` reports what the API server would refuse in metadata (webhook.objectmeta):
the unit table (tests/unit/test_objectmeta.py) sent to the real API server as server-side dry
runs, which must refuse exactly the cases the table expects refused, naming the same field."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cluster import KubeApiError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_objectmeta import CASES

from webhook.objectmeta import problems

# The bare API server's verdict, without batchgate's webhooks in the way.
pytestmark = pytest.mark.namespace_labels({"batchgate.io/admission": "disabled"})


@pytest.mark.parametrize(("name", "obj", "field"), CASES, ids=[c[0] for c in CASES])
def test_the_api_server_agrees_with_check(kube, namespace, name, obj, field):
    obj = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if v is not None} | {"namespace": namespace}}
    path = (f"/api/v1/namespaces/{namespace}/pods" if obj["kind"] == "Pod"
            else f"/apis/batch/v1/namespaces/{namespace}/jobs")
    try:
        kube.request("POST", path, obj, query={"dryRun": "All"})
        refused = None
    except KubeApiError as e:
        assert e.status == 422, e
        refused = str(e)
    assert (refused is None) == (field is None), f"{name}: API server said {refused or 'created'}"
    assert (problems(obj) == []) == (field is None)
    if field is not None:  # the API server names a template's metadata without ".metadata"
        assert field.replace(".metadata.", ".") in refused, refused
