"""`batchgate check` and `batchgate test` as a CI pipeline calls them: exit codes and streams."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import FIXTURES, POLICIES, ROOT
from webhook.cli import main

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def run(capsys, *args, stdin=None, monkeypatch=None):
    if stdin is not None:
        import io
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_mutates_and_exits_0(capsys, tmp_path):
    f = tmp_path / "pod.yaml"
    f.write_text(yaml.safe_dump(POD))
    code, out, err = run(capsys, "check", str(f))
    assert code == 0
    obj = yaml.safe_load(out)
    assert obj["spec"]["priorityClassName"] == "batchgate-batch"
    assert "warning: Pod default/p" in err


def test_check_example_job(capsys):
    code, out, err = run(capsys, "check", str(ROOT / "examples" / "job.yaml"))
    assert code == 0, err
    job = yaml.safe_load(out)
    assert job["spec"]["template"]["metadata"]["labels"]["batchgate.io/queue"] == "batch"


def test_check_denial_exits_1_and_names_object(capsys, tmp_path):
    bad = {**POD, "metadata": {"name": "q", "labels": {"batchgate.io/queue": "nope"}}}
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump_all([POD, bad]))
    code, out, err = run(capsys, "check", "--namespace", "team", str(f))
    assert code == 1
    assert "denied: Pod team/q: queue-priority: queue 'nope' does not exist" in err
    assert len(list(yaml.safe_load_all(out))) == 1  # the allowed one still comes out


def test_check_stdin_json_list_and_json_output(capsys, monkeypatch):
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": [POD, {**POD, "metadata": {"name": "p2"}}]})
    code, out, _ = run(capsys, "check", "-o", "json", "-", stdin=doc, monkeypatch=monkeypatch)
    assert code == 0
    assert [i["metadata"]["name"] for i in json.loads(out)["items"]] == ["p", "p2"]


def test_check_diff_output(capsys, tmp_path):
    f = tmp_path / "pod.json"
    f.write_text(json.dumps(POD))
    code, out, _ = run(capsys, "check", "-o", "diff", str(f))
    assert code == 0 and "+  priorityClassName: batchgate-batch" in out


def test_check_admin_user_may_use_admin_class(capsys, tmp_path):
    pod = json.loads(json.dumps(POD))
    pod["spec"]["priorityClassName"] = "batchgate-urgent"
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(pod))
    assert run(capsys, "check", "--user", "alice", str(f))[0] == 1
    assert run(capsys, "check", "--user", "root", "--groups", "batchgate:admins", str(f))[0] == 0


def test_check_captured_admission_review(capsys):
    code, out, _ = run(capsys, "check", str(FIXTURES / "job-create.mutate.json"))
    assert code == 0 and yaml.safe_load(out)["kind"] == "Job"


@pytest.mark.parametrize(("content", "needle"), [
    ("kind: Pod\n", "apiVersion and kind"),
    ("a: [1,\n", "x.yaml:2: invalid YAML"),
    ("a: 1\nb: 2024-13-45\n", "x.yaml:2: cannot read '2024-13-45' as timestamp: month must be in 1..12"),
    ("a: !foo x\n", "x.yaml:1: invalid YAML: could not determine a constructor for the tag '!foo'"),
    ("a: " + "[" * 200000 + "]" * 200000, "x.yaml:1: nested more than 64 levels deep"),  # was a segfault
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdef", "bcdefg", strict=True)),
     "expands to more than 200000 nodes"),
])
def test_check_usage_errors_exit_2(capsys, tmp_path, content, needle):
    f = tmp_path / "x.yaml"
    f.write_text(content)
    code, _, err = run(capsys, "check", str(f))
    assert code == 2 and needle in err


def test_check_missing_file_exits_2(capsys, tmp_path):
    code, _, err = run(capsys, "check", str(tmp_path / "nope.yaml"))
    assert code == 2 and "cannot read" in err


def test_check_bad_bundle_exits_2(capsys, tmp_path):
    shutil.copytree(POLICIES, tmp_path / "p")
    (tmp_path / "p" / "bundle.yaml").write_text("apiVersion: batchgate.io/v1alpha1\nkind: Bundle\nspec: {}\n")
    f = tmp_path / "pod.yaml"
    f.write_text(yaml.safe_dump(POD))
    code, _, err = run(capsys, "check", "--policies", str(tmp_path / "p"), str(f))
    assert code == 2 and "bundle.yaml:3: spec.priorityClasses: required field is missing" in err


def test_bundle_suites_pass(capsys):
    code, out, _ = run(capsys, "test", str(POLICIES))
    assert code == 0, out
    assert " 0 failed" in out


def test_test_fails_for_policy_without_readme(capsys, tmp_path):
    shutil.copytree(POLICIES, tmp_path / "p")
    (tmp_path / "p" / "kata-cpu" / "README.md").unlink()
    code, out, _ = run(capsys, "test", str(tmp_path / "p"))
    assert code == 1 and "kata-cpu: policy has no README.md" in out


def test_test_fails_for_policy_without_suite(capsys, tmp_path):
    shutil.copytree(POLICIES, tmp_path / "p")
    (tmp_path / "p" / "shm" / "suite.yaml").unlink(missing_ok=True)
    code, out, _ = run(capsys, "test", str(tmp_path / "p"))
    assert code == 1 and "shm: policy has no suite.yaml" in out


def test_python_dash_m_and_help():
    r = subprocess.run([sys.executable, "-m", "webhook", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0
    for cmd in ("serve", "check", "test", "certs", "reconcile"):
        assert cmd in r.stdout
