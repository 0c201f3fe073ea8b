"""`batchgate check` and `batchgate test` as a CI pipeline calls them: exit codes and streams."""

from __future__ import annotations

import json
import re
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


def test_queue_label_on_the_template_is_a_choice(capsys, tmp_path):
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
           "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {
               "metadata": {"labels": {"app": "d", "batchgate.io/queue": "interactive"}},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    f = tmp_path / "d.yaml"
    f.write_text(yaml.safe_dump(dep))
    code, out, err = run(capsys, "check", str(f))
    assert code == 0 and "no batchgate.io/queue label" not in err
    assert yaml.safe_load(out)["metadata"]["labels"]["batchgate.io/queue"] == "interactive"
    del dep["spec"]["template"]["metadata"]["labels"]["batchgate.io/queue"]
    f.write_text(yaml.safe_dump(dep))
    code, out, err = run(capsys, "check", str(f))
    assert "no batchgate.io/queue label on the Deployment or its pod template; using queue 'batch'" in err


def test_system_daemonset_denial_says_how_infrastructure_is_exempted(capsys, tmp_path):
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "monitoring"},
          "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": {
              "metadata": {"labels": {"app": "a"}},
              "spec": {"priorityClassName": "system-node-critical",
                       "containers": [{"name": "c", "image": "busybox"}]}}}}
    f = tmp_path / "ds.yaml"
    f.write_text(yaml.safe_dump(ds))
    code, _, err = run(capsys, "check", str(f))
    assert code == 1
    assert "namespace the bundle excludes" in err and "applied by an admin" in err
    assert run(capsys, "check", "--user", "root", "--groups", "batchgate:admins", str(f))[0] == 0


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
    ("a: !foo x\n", "x.yaml:1: invalid YAML: could not determine a constructor for the tag '!foo'"),
    # was a segfault; refused by our depth check or PyYAML's own (6.0.4+), either naming nesting
    ("a: " + "[" * 200000 + "]" * 200000, re.compile(r"x\.yaml:1: .*nest")),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdef", "bcdefg", strict=True)),
     "expands to more than 200000 nodes"),
])
def test_check_usage_errors_exit_2_and_the_rest_is_still_decided(capsys, tmp_path, content, needle):
    f = tmp_path / "x.yaml"
    f.write_text(content)
    good = tmp_path / "pod.yaml"
    good.write_text(yaml.safe_dump(POD))
    code, out, err = run(capsys, "check", str(f), str(good))
    assert code == 2
    assert (needle.search(err) if isinstance(needle, re.Pattern) else needle in err), err
    assert yaml.safe_load(out)["metadata"]["name"] == "p"


def test_check_missing_file_exits_2(capsys, tmp_path):
    code, _, err = run(capsys, "check", str(tmp_path / "nope.yaml"))
    assert code == 2 and "cannot read" in err


def test_check_skips_kustomization_and_directories(capsys, tmp_path):
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [pod.yaml]\n")
    (tmp_path / "old-kustomization.yaml").write_text("resources: [pod.yaml]\nnamePrefix: x-\n")
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(POD))
    (tmp_path / "sub").mkdir()
    code, out, err = run(capsys, "check", str(tmp_path / "kustomization.yaml"), str(tmp_path / "old-kustomization.yaml"),
                         str(tmp_path / "sub"), str(tmp_path / "pod.yaml"))
    assert code == 2, err  # an empty directory is an unusable input, as for kubectl
    assert err.count("skipped: ") == 2
    assert "kustomization.yaml: not a Kubernetes object (Kustomization of kustomize.config.k8s.io" in err
    assert "old-kustomization.yaml: not a Kubernetes object (no apiVersion and no kind" in err
    assert "sub: a directory with no .json, .yaml, .yml files (-R to look in its subdirectories)" in err
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out)] == ["p"]


def test_check_reads_a_directory_as_kubectl_apply_does(capsys, tmp_path):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(POD))
    (tmp_path / "b.json").write_text(json.dumps({**POD, "metadata": {"name": "p2"}}))
    (tmp_path / "notes.txt").write_text("kind: Pod\n")  # not a manifest suffix: not read
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.yml").write_text(yaml.safe_dump({**POD, "metadata": {"name": "p3"}}))
    code, out, err = run(capsys, "check", str(tmp_path))
    assert code == 0, err
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out)] == ["p", "p2"]
    code, out, err = run(capsys, "check", "-R", str(tmp_path))
    assert code == 0, err
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out)] == ["p", "p2", "p3"]


def test_check_with_no_objects_at_all_exits_2(capsys, tmp_path):
    f = tmp_path / "empty.yaml"
    f.write_text("# nothing here\n---\n")
    code, _, err = run(capsys, "check", str(f))
    assert code == 2 and "no objects passed to check" in err


@pytest.mark.parametrize("pods", [[POD], [POD, {**POD, "metadata": {"name": "p2"}}], []])
def test_check_json_is_always_one_list(capsys, tmp_path, pods):
    f = tmp_path / "pods.yaml"
    f.write_text(yaml.safe_dump_all(pods) if pods else "# nothing\n")
    code, out, _ = run(capsys, "check", "-o", "json", str(f))
    assert code == (0 if pods else 2)  # no objects at all: as kubectl, an error, still one List
    doc = json.loads(out)
    assert doc["kind"] == "List" and doc["apiVersion"] == "v1"
    assert [i["metadata"]["name"] for i in doc["items"]] == [p["metadata"]["name"] for p in pods]


def test_check_json_when_everything_is_denied(capsys, tmp_path):
    bad = {**POD, "metadata": {"name": "q", "labels": {"batchgate.io/queue": "nope"}}}
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump_all([bad, {**bad, "metadata": {**bad["metadata"], "name": "r"}}]))
    code, out, err = run(capsys, "check", "-o", "json", str(f))
    assert code == 1 and err.count("denied: ") == 2
    assert json.loads(out) == {"apiVersion": "v1", "kind": "List", "items": []}


def test_check_yaml_dates_stay_strings(capsys, tmp_path):
    f = tmp_path / "cm.yaml"
    f.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, annotations: {released: 2024-01-31}}\n"
                 "data: {when: 2024-01-31T10:00:00Z, bad: 2024-13-45}\n")
    for fmt in ("yaml", "json", "diff"):
        code, out, err = run(capsys, "check", "-o", fmt, str(f))
        assert code == 0, err
    code, out, _ = run(capsys, "check", "-o", "json", str(f))
    item = json.loads(out)["items"][0]
    assert item["data"]["when"] == "2024-01-31T10:00:00Z"
    assert item["data"]["bad"] == "2024-13-45"  # a string, as kubectl sends it; no date is parsed
    assert item["metadata"]["annotations"]["released"] == "2024-01-31"


def test_check_diff_is_empty_when_nothing_changes(capsys, tmp_path):
    cm = tmp_path / "cm.yaml"
    cm.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n")
    code, out, _ = run(capsys, "check", "-o", "diff", str(cm))
    assert code == 0 and out == ""
    # what check admitted, checked again, changes nothing: no "+ namespace: default" either
    code, admitted, _ = run(capsys, "check", str(ROOT / "examples" / "job.yaml"))
    f = tmp_path / "admitted.yaml"
    f.write_text(admitted)
    code, out, _ = run(capsys, "check", "-o", "diff", str(f))
    assert code == 0 and out == ""
    code, out, _ = run(capsys, "check", str(cm))
    assert "namespace" not in yaml.safe_load(out)["metadata"]


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


def test_check_a_job_with_list_template_labels_is_a_usage_error_not_a_crash(capsys, tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n"
                 "    metadata: {labels: [app, sim]}\n    spec: {containers: [{name: c, image: busybox}]}\n")
    code, _, err = run(capsys, "check", str(f))
    assert code == 2, err
    assert "spec.template.metadata.labels must map strings to strings" in err and "Traceback" not in err


def test_bundle_suite_case_may_name_the_policies_it_runs(capsys, tmp_path):
    """policies: in the bundle's suite.yaml runs those policies only (here the shm sample's exact
    expected object, which every other policy would change too); in a policy's own suite it is refused."""
    shutil.copytree(POLICIES, tmp_path / "p")
    (tmp_path / "p" / "suite.yaml").write_text(
        "apiVersion: batchgate.io/v1alpha1\nkind: Suite\ncases:\n"
        "  - name: shm alone, as its own suite decides it\n"
        "    object: shm/samples/pod-memory-limit.yaml\n"
        "    policies: [shm]\n"
        "    expect: {allowed: true, mutated: shm/samples/pod-memory-limit.mutated.yaml}\n"
        "  - name: the whole bundle changes more than shm does\n"
        "    object: shm/samples/pod-memory-limit.yaml\n"
        "    expect: {mutated: shm/samples/pod-memory-limit.mutated.yaml}\n")
    code, out, _ = run(capsys, "test", "-v", str(tmp_path / "p"))
    assert code == 1, out
    assert "ok   p: shm alone, as its own suite decides it" in out
    assert "FAIL p: the whole bundle changes more than shm does" in out

    (tmp_path / "p" / "suite.yaml").write_text(
        "apiVersion: batchgate.io/v1alpha1\nkind: Suite\ncases:\n"
        "  - name: a typo\n    object: shm/samples/pod-memory-limit.yaml\n    policies: [shm, smh]\n"
        "    expect: {}\n")
    code, _, err = run(capsys, "test", str(tmp_path / "p"))
    assert code == 2 and "suite.yaml:6: cases[0].policies: no policy named 'smh' in the bundle" in err, err

    (tmp_path / "p" / "suite.yaml").unlink()
    with (tmp_path / "p" / "shm" / "suite.yaml").open("a") as f:
        f.write("  - name: own suite\n    object: samples/pod-small.yaml\n    policies: [shm]\n    expect: {}\n")
    code, _, err = run(capsys, "test", str(tmp_path / "p"))
    assert code == 2 and "policies: not supported in a policy's own suite" in err, err


def test_one_policys_suite_runs_alone_by_folder_or_by_flag(capsys, tmp_path):
    shutil.copytree(POLICIES, tmp_path / "p")
    (tmp_path / "p" / "kata-cpu" / "README.md").unlink()  # another policy's failure stays out of it
    for args in (["test", "-v", str(tmp_path / "p" / "shm")], ["test", "-v", "--policy", "shm", str(tmp_path / "p")]):
        code, out, _ = run(capsys, *args)
        assert code == 0, out
        cases = [line for line in out.splitlines() if line.startswith("ok ")]
        assert cases and all(line.startswith("ok   shm: ") for line in cases), out
        assert out.strip().endswith(f"{len(cases)} passed, 0 failed")
    code, out, _ = run(capsys, "test", "--policy", "kata-cpu", str(tmp_path / "p"))
    assert code == 1 and "kata-cpu: policy has no README.md" in out
    code, _, err = run(capsys, "test", "--policy", "smh", str(tmp_path / "p"))
    assert code == 2 and "no policy named smh" in err


def _actions(parser, name="batchgate"):
    import argparse
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub, sp in a.choices.items():
                yield from _actions(sp, sub)
        elif not isinstance(a, argparse._HelpAction | argparse._VersionAction):
            yield name, a


def test_every_flag_of_every_subcommand_says_what_it_does_and_its_default():
    from webhook.cli import build_parser
    missing = []
    for command, action in _actions(build_parser()):
        flag = "/".join(action.option_strings) or action.dest
        if not action.help:
            missing.append(f"{command} {flag}: no help")
        elif action.option_strings and action.nargs != 0 and "default" not in action.help:
            missing.append(f"{command} {flag}: its help names no default")
    assert not missing, "\n".join(missing)
    commands = {c for c, _ in _actions(build_parser())}
    assert {"serve", "check", "test", "certs", "reconcile", "queue", "maintenance", "manifests", "audit"} <= commands
