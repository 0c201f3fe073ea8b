"""webhook.objectmeta: what the API server refuses in metadata, reported by `batchgate check`.
tests/e2e/test_check_api_server.py sends the same table to a real API server."""

from __future__ import annotations

import yaml

from webhook.cli import main
from webhook.objectmeta import problems

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "default"},
       "spec": {"template": {"metadata": {}, "spec": {"restartPolicy": "Never",
                                                      "containers": [{"name": "c", "image": "busybox"}]}}}}


def with_meta(obj, path=("metadata",), **fields):
    out = yaml.safe_load(yaml.safe_dump(obj))
    node = out
    for step in path:
        node = node.setdefault(step, {})
    node.update(fields)
    return out


# (id, object, the field the API server names (check's message names it too), or None: accepted).
# Shared with the e2e test.
CASES = [
    ("pod name with capitals", with_meta(POD, name="Upper"), "metadata.name"),
    ("pod name of 253 characters", with_meta(POD, name="a" * 253), None),
    ("pod name of 254 characters", with_meta(POD, name="a" * 254), "metadata.name"),
    ("pod name with dots", with_meta(POD, name="a.b.c"), None),
    ("pod generateName ending in -", with_meta(POD, name=None, generateName="run-"), None),
    ("pod generateName with _", with_meta(POD, name=None, generateName="run_"), "metadata.generateName"),
    ("job name of 63 characters", with_meta(JOB, name="j" * 63), None),
    ("job name of 64 characters (its pods' job-name label)", with_meta(JOB, name="j" * 64), "spec.template.labels"),
    ("label key with a prefix", with_meta(POD, labels={"example.com/team": "a"}), None),
    ("label key with a space", with_meta(POD, labels={"bad key": "a"}), "metadata.labels"),
    ("label key with an upper-case prefix", with_meta(POD, labels={"Example.com/team": "a"}), "metadata.labels"),
    ("label key name of 64 characters", with_meta(POD, labels={"k" * 64: "a"}), "metadata.labels"),
    ("label value empty", with_meta(POD, labels={"team": ""}), None),
    ("label value of 64 characters", with_meta(POD, labels={"team": "v" * 64}), "metadata.labels"),
    ("label value starting with -", with_meta(POD, labels={"team": "-a"}), "metadata.labels"),
    ("annotation key upper-case prefix (checked lowercased)", with_meta(POD, annotations={"Example.COM/x": "y"}), None),
    ("annotation key empty prefix", with_meta(POD, annotations={"/x": "y"}), "metadata.annotations"),
    ("annotations over 256 KiB", with_meta(POD, annotations={"big": "x" * (256 * 1024)}), "metadata.annotations"),
    ("pod template label of a Job", with_meta(JOB, ("spec", "template", "metadata"), labels={"app": "a b"}),
     "spec.template.metadata.labels"),
]


def test_the_table():
    for name, obj, field in CASES:
        obj = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if v is not None}}
        found = problems(obj)
        if field is None:
            assert found == [], name
        else:
            assert found and all(field in p for p in found), (name, found)


def test_a_job_with_manual_selector_may_have_a_longer_name():
    job = with_meta(JOB, name="j" * 64)
    job["spec"]["manualSelector"] = True
    assert problems(job) == []


def test_kinds_with_other_name_rules_are_not_checked():
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:x"}}
    assert problems(role, namespaced=False) == []


def test_check_reports_them_and_fails(capsys, tmp_path):
    f = tmp_path / "pods.yaml"
    f.write_text(yaml.safe_dump_all([with_meta(POD, name="Upper"), with_meta(POD, name="fine")]))
    code = main(["check", str(f)])
    out, err = capsys.readouterr()
    assert code == 1
    assert ("invalid: Pod default/Upper: metadata.name: Invalid value: 'Upper': must be a lowercase RFC 1123 "
            "subdomain") in err and "(the API server refuses this)" in err
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out)] == ["fine"]
