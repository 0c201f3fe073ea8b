"""scavengerjob: the spec of a ScavengerJob, every bad field named."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import POLICIES
from tests.unit.conftest import decided, only, settings_error
from tests.unit.rules.test_scavenger_qos import pod, run
from webhook.bundle import Bundle
from webhook.engine import Decision
from webhook.offline import Caller, synthetic_review
from webhook.rules.scavengerjob import scavengerjob_problems


@pytest.fixture(scope="module")
def sj(bundle: Bundle) -> Bundle:
    return only(bundle, "scavengerjob")


# -- scavengerjob -------------------------------------------------------------------------
def sjob(**spec_changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "image": "registry.example.org/hpc/gromacs:2023.3",
        "command": ["gmx", "mdrun"],
        "args": ["-cpi", "/data/md.cpt"],
        "env": [{"name": "OMP_NUM_THREADS", "value": "4"}],
        "resources": {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}},
        "volumes": [
            {"name": "data", "mountPath": "/data", "persistentVolumeClaim": {"claimName": "md-data"}},
            {"name": "params", "mountPath": "/etc/gromacs", "readOnly": True, "configMap": {"name": "md-params"}},
            {"name": "license", "mountPath": "/run/secrets/license", "secret": {"secretName": "license"}},
        ],
        "pods": 2,
        "runAsUser": 1000,
        "duration": "30m",
    }
    for key, value in spec_changes.items():
        if value is ...:
            spec.pop(key)
        else:
            spec[key] = value
    return {"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob",
            "metadata": {"name": "md", "namespace": "demo"}, "spec": spec}


def vol(**fields: Any) -> list[dict[str, Any]]:
    return [{"name": "data", "mountPath": "/data", "persistentVolumeClaim": {"claimName": "md-data"}}, fields]


SJ_OK = [
    ("full example", sjob()),
    ("minimal", sjob(args=..., env=..., volumes=..., pods=...)),
    ("requests left out", sjob(resources={"limits": {"cpu": "500m", "memory": "256Mi"}})),
    ("gpu with equal request", sjob(resources={"limits": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"},
                                               "requests": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}})),
    ("equal in other units", sjob(resources={"limits": {"cpu": "1", "memory": "1Gi"},
                                             "requests": {"cpu": "1000m", "memory": "1024Mi"}})),
    ("nested mount paths", sjob(volumes=vol(name="sub", mountPath="/data/sub", configMap={"name": "x"}))),
    ("duration with two units", sjob(duration="1h30m")),
    ("checkpoint exit code", sjob(checkpointExitCode=3)),
    ("declared checkpoint interval", sjob(checkpoint={"interval": "10m"})),
    ("declared checkpoint interval, no duration", sjob(checkpoint={"interval": "1h"}, duration=...)),
    ("numeric cpu", sjob(resources={"limits": {"cpu": 2, "memory": "1Gi"}})),
]


@pytest.mark.parametrize("obj", [c[1] for c in SJ_OK], ids=[c[0] for c in SJ_OK])
def test_valid_scavengerjobs(sj, obj):
    d = run(sj, obj)
    assert d.allowed, d.message


SJ_BAD = [
    ("no spec", {**sjob(), "spec": None}, "spec: required"),
    ("image missing", sjob(image=...), "spec.image: required"),
    ("image with spaces", sjob(image="my image"), "spec.image: must be a container image"),
    ("command a string", sjob(command="gmx mdrun"), "spec.command: must be a non-empty list of strings"),
    ("command empty", sjob(command=[]), "spec.command: must be a non-empty list"),
    ("command item a number", sjob(command=["sleep", 10]), "spec.command[1]: must be a string (quote numbers)"),
    ("args not strings", sjob(args=[1]), "spec.args[0]: must be a string"),
    ("env bad name", sjob(env=[{"name": "1X", "value": "y"}]), "spec.env[0]: must be {name: VAR_NAME"),
    ("env value a number", sjob(env=[{"name": "X", "value": 4}]), "spec.env[0]"),
    ("resources missing", sjob(resources=...), "spec.resources: required"),
    ("cpu limit missing", sjob(resources={"limits": {"memory": "1Gi"}}), "spec.resources.limits.cpu: required"),
    ("memory limit missing, request given", sjob(resources={"limits": {"cpu": "1"}, "requests": {"cpu": "1", "memory": "2Gi"}}),
     "spec.resources.limits.memory: required (equal to spec.resources.requests.memory, 2Gi)"),
    ("request differs", sjob(resources={"limits": {"cpu": "4", "memory": "8Gi"}, "requests": {"cpu": "2", "memory": "8Gi"}}),
     "spec.resources.requests.cpu: 2 must equal spec.resources.limits.cpu (4)"),
    ("gpu request without limit", sjob(resources={"limits": {"cpu": "4", "memory": "8Gi"},
                                                  "requests": {"nvidia.com/gpu": "1"}}),
     "spec.resources.limits.nvidia.com/gpu: required, equal to spec.resources.requests.nvidia.com/gpu (1)"),
    ("not a quantity", sjob(resources={"limits": {"cpu": "four", "memory": "8Gi"}}),
     "spec.resources.limits.cpu: 'four' is not a quantity"),
    ("zero memory", sjob(resources={"limits": {"cpu": "1", "memory": "0"}}), "spec.resources.limits.memory: must be more than zero"),
    ("unknown resources field", sjob(resources={"limits": {"cpu": "1", "memory": "1Gi"}, "limit": {}}),
     "spec.resources.limit: unknown field"),
    ("volumes not a list", sjob(volumes={"data": "/data"}), "spec.volumes: must be a list"),
    ("duplicate mount path", sjob(volumes=vol(name="b", mountPath="/data/", configMap={"name": "x"})),
     "spec.volumes[1].mountPath: /data/ is already mounted by spec.volumes[0]"),
    ("duplicate mount path after normalising", sjob(volumes=vol(name="b", mountPath="/x/../data", secret={"secretName": "s"})),
     "spec.volumes[1].mountPath: /x/../data is already mounted by spec.volumes[0]"),
    ("duplicate name", sjob(volumes=vol(name="data", mountPath="/other", configMap={"name": "x"})),
     "spec.volumes[1].name: 'data' is also the name of spec.volumes[0]"),
    ("relative mount path", sjob(volumes=vol(name="b", mountPath="data", configMap={"name": "x"})),
     "spec.volumes[1].mountPath: required, an absolute path like /data, got 'data'"),
    ("two sources", sjob(volumes=vol(name="b", mountPath="/b", configMap={"name": "x"}, secret={"secretName": "s"})),
     "spec.volumes[1]: needs exactly one of persistentVolumeClaim, configMap, secret (found configMap, secret)"),
    ("no source", sjob(volumes=vol(name="b", mountPath="/b")), "spec.volumes[1]: needs exactly one of"),
    ("claim name missing", sjob(volumes=vol(name="b", mountPath="/b", persistentVolumeClaim={})),
     "spec.volumes[1].persistentVolumeClaim.claimName: required"),
    ("configMap with the secret's key", sjob(volumes=vol(name="b", mountPath="/b", configMap={"secretName": "x"})),
     "spec.volumes[1].configMap.secretName: unknown field (known: name)"),
    ("hostPath is not offered", sjob(volumes=vol(name="b", mountPath="/b", hostPath={"path": "/"})),
     "spec.volumes[1].hostPath: unknown field"),
    ("readOnly not a bool", sjob(volumes=vol(name="b", mountPath="/b", readOnly="yes", secret={"secretName": "s"})),
     "spec.volumes[1].readOnly: must be true or false"),
    ("zero pods", sjob(pods=0), "spec.pods: must be a whole number >= 1, got 0"),
    ("pods a bool", sjob(pods=True), "spec.pods: must be a whole number >= 1, got True"),
    ("root", sjob(runAsUser=0), "spec.runAsUser: must be a user id >= 1 (scavengers never run as root), got 0"),
    ("runAsUser missing", sjob(runAsUser=...), "spec.runAsUser: required"),
    ("runAsUser a string", sjob(runAsUser="1000"), "spec.runAsUser: must be a user id >= 1"),
    ("duration missing", sjob(duration=...), "spec.duration: required, the protection period"),
    ("duration words", sjob(duration="half an hour"), "spec.duration: 'half an hour' is not a duration, write e.g. 30m"),
    ("duration a number", sjob(duration=30), "spec.duration: 30 is not a duration"),
    # issue 27: every duration and quantity is bounded, and the denial names the bound
    ("duration past the bound", sjob(duration="99999999999999999999s"),
     "spec.duration: '99999999999999999999s' is longer than 3650d, the longest duration batchgate accepts"),
    ("duration just past the bound", sjob(duration="3650d1s"), "is longer than 3650d"),
    ("too many pods", sjob(pods=10_001), "spec.pods: 10001 is more than 10000, the most pods a ScavengerJob may have"),
    ("cpu past the bound", sjob(resources={"limits": {"cpu": "100000", "memory": "1Gi"}}),
     "spec.resources.limits.cpu: 100000 is more than 10000, the most a scavenger pod may ask for"),
    ("memory past the bound", sjob(resources={"limits": {"cpu": "1", "memory": "1Ei"}}),
     "spec.resources.limits.memory: 1Ei is more than 1Pi, the most a scavenger pod may ask for"),
    ("checkpoint exit code 0", sjob(checkpointExitCode=0), "spec.checkpointExitCode: must be a whole number 1..127"),
    ("checkpoint exit code 143", sjob(checkpointExitCode=143), "128 and up mean killed by a signal), got 143"),
    ("checkpoint exit code a string", sjob(checkpointExitCode="3"), "spec.checkpointExitCode: must be a whole"),
    ("checkpoint not a mapping", sjob(checkpoint="10m"), "spec.checkpoint: must be a mapping like {interval: 10m}"),
    ("checkpoint without interval", sjob(checkpoint={}), "spec.checkpoint.interval: required, how often"),
    ("checkpoint interval words", sjob(checkpoint={"interval": "often"}),
     "spec.checkpoint.interval: 'often' is not a duration"),
    ("checkpoint interval too short", sjob(checkpoint={"interval": "30s"}),
     "spec.checkpoint.interval: 30s is shorter than 1m"),
    ("checkpoint unknown field", sjob(checkpoint={"interval": "10m", "signal": "USR1"}),
     "spec.checkpoint.signal: unknown field (known: interval)"),
    ("checkpoint and exit code", sjob(checkpoint={"interval": "10m"}, checkpointExitCode=3),
     "spec.checkpoint: set either spec.checkpoint (one long pod"),
    ("no duration, no checkpoint", sjob(duration=...), "spec.duration: required, the protection period"),
    ("unknown spec field", sjob(priority=100), "spec.priority: unknown field (known: image, command"),
]


@pytest.mark.parametrize(("obj", "message"), [c[1:] for c in SJ_BAD], ids=[c[0] for c in SJ_BAD])
def test_invalid_scavengerjobs(sj, obj, message):
    d = run(sj, obj)
    assert not d.allowed
    assert d.message.startswith("scavengerjob: invalid ScavengerJob demo/md: "), d.message
    assert message in d.message, d.message


def test_the_bounds_themselves_are_allowed(sj):
    assert run(sj, sjob(duration="3650d", pods=10_000,
                        resources={"limits": {"cpu": "10000", "memory": "1Pi"}})).allowed


def test_all_problems_at_once():
    obj = sjob(image="", runAsUser=0, pods=0, duration="soon")
    problems = scavengerjob_problems(obj)
    assert [p.split(":")[0] for p in problems] == ["spec.image", "spec.pods", "spec.runAsUser", "spec.duration"]


def test_update_of_metadata_only_passes_even_for_an_invalid_stored_object(sj):
    stored = sjob(runAsUser=0)
    stored["metadata"]["finalizers"] = ["batchgate.io/scavengerjob"]
    unfinalized = copy.deepcopy(stored)
    del unfinalized["metadata"]["finalizers"]
    assert run(sj, unfinalized, op="UPDATE", old=stored).allowed


def test_update_that_changes_the_spec_is_validated(sj):
    stored = sjob()
    assert run(sj, sjob(pods=4), op="UPDATE", old=stored).allowed
    d = run(sj, sjob(pods=-1), op="UPDATE", old=stored)
    assert not d.allowed and "spec.pods" in d.message


def running_sj(phase: str = "Running", job: str | None = "md-3", **spec_changes: Any) -> dict[str, Any]:
    """``sjob`` as stored with the status the reconciler writes: segment 3 started (``jobName``)."""
    obj = sjob(**spec_changes)
    obj["status"] = {"phase": phase, "segment": 3, **({"jobName": job} if job is not None else {})}
    return obj


def edit(b: Bundle, old: dict[str, Any], new: dict[str, Any], *, user: str = "alice",
         groups: tuple[str, ...] = ("system:authenticated",)) -> Decision:
    d = decided(synthetic_review(new, Caller("UPDATE", user, groups, "demo"), old_object=old), b, phase="check")
    assert not d.errors, d.errors
    return d


BIGGER = [
    ("more pods", {"pods": 3}, ["spec.pods from 2 to 3"]),
    ("more cpu", {"resources": {"requests": {"cpu": "5", "memory": "8Gi"}, "limits": {"cpu": "5", "memory": "8Gi"}}},
     ["the cpu request of spec.resources from 4 to 5", "the cpu limit of spec.resources from 4 to 5"]),
    ("more memory, limits only", {"resources": {"limits": {"cpu": "4", "memory": "16Gi"}}},
     ["the memory request of spec.resources from 8Gi to 16Gi", "the memory limit of spec.resources from 8Gi to 16Gi"]),
    ("a gpu added", {"resources": {"limits": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}},
     ["the nvidia.com/gpu request of spec.resources from 0 to 1"]),
    ("pods and cpu", {"pods": 8, "resources": {"limits": {"cpu": "8", "memory": "8Gi"}}},
     ["spec.pods from 2 to 8", "the cpu limit of spec.resources from 4 to 8"]),
]


@pytest.mark.parametrize(("what", "changes", "named"), BIGGER, ids=[b[0] for b in BIGGER])
def test_a_user_may_not_grow_a_running_scavengerjob(sj, what, changes, named):
    """At its next segment boundary the reconciler starts a Job from the spec without checking the
    free room and maxShare again: a running ScavengerJob may shrink, not grow (as Slurm's jobs)."""
    d = edit(sj, running_sj(), running_sj(**changes))
    assert not d.allowed
    assert "ScavengerJob demo/md is running (Job md-3)" in d.message, d.message
    for n in named:
        assert n in d.message, d.message
    assert "delete it and submit it again with the new size (it waits until that fits)" in d.message
    assert "Lowering is allowed, and so is any edit while it waits" in d.message


def test_a_running_scavengerjobs_size_is_compared_by_pods_and_quantities():
    from webhook.rules.scavengerjob import grown_while_running
    assert grown_while_running(running_sj(), running_sj(pods=...)) == []  # unset: 1, fewer than 2
    assert grown_while_running(running_sj(pods=...), running_sj()) == [("spec.pods", "1", "2")]
    assert grown_while_running(running_sj(), running_sj(resources={"limits": {"cpu": "4", "memory": "8Gi"}})) == []
    assert grown_while_running(running_sj(), running_sj(resources={"limits": {"cpu": "4000m", "memory": "8192Mi"}})) == []


SMALLER = [
    ("fewer pods", {"pods": 1}),
    ("less cpu and memory", {"resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}),
    ("other fields", {"duration": "2h", "image": "registry.example.org/hpc/gromacs:2024.1"}),
]


@pytest.mark.parametrize(("what", "changes"), SMALLER, ids=[s[0] for s in SMALLER])
def test_a_user_may_shrink_a_running_scavengerjob_or_change_the_rest(sj, what, changes):
    assert edit(sj, running_sj(), running_sj(**changes)).allowed


@pytest.mark.parametrize(("phase", "job"), [("Pending", None), ("Interrupted", None), ("", None),
                                            ("Completed", "md-3"), ("Failed", "md-3")])
def test_a_waiting_or_finished_scavengerjob_may_grow(sj, phase, job):
    """While it waits (no jobName) its start is checked against the room and maxShare with the new
    size; once finished nothing starts again."""
    old = running_sj(phase, job) if phase else sjob()
    assert edit(sj, old, running_sj(phase, job, pods=8) if phase else sjob(pods=8)).allowed


@pytest.mark.parametrize("who", [("root", ("batchgate:admins", "system:authenticated")),
                                 ("system:serviceaccount:batchgate-system:batchgate-reconciler",
                                  ("system:serviceaccounts", "system:authenticated"))], ids=["admin", "reconciler"])
def test_admins_and_the_reconciler_may_grow_a_running_scavengerjob(sj, who):
    user, groups = who
    assert edit(sj, running_sj(), running_sj(pods=8), user=user, groups=groups).allowed


def test_a_grown_and_invalid_edit_names_both(sj):
    d = edit(sj, running_sj(), running_sj(pods=3, runAsUser=0))
    assert "spec.runAsUser: must be a user id >= 1" in d.message and "spec.pods from 2 to 3" in d.message


def test_scavengerjob_policy_ignores_other_kinds(sj):
    assert run(sj, pod({})).allowed


def test_the_shipped_example_is_valid(sj):

    example = yaml.safe_load((POLICIES / "scavengerjob" / "samples" / "scavengerjob-gromacs.yaml").read_text())
    assert scavengerjob_problems(example) == []


def test_scavengerjob_kind_match_is_the_crd(bundle):
    policy = next(p for p in bundle.policies if p.name == "scavengerjob")
    assert policy.match.kinds == (("batchgate.io", "v1alpha1", "ScavengerJob"),)
    assert policy.match.operations == ("CREATE", "UPDATE")
    assert policy.failure_policy == "Fail"


def test_settings_are_rejected_with_file_line_and_field(tmp_path: Path):
    e = settings_error(tmp_path, "scavengerjob", "    share: 70\n")
    assert str(e).endswith("scavengerjob/policy.yaml:8: spec.settings.share: unknown field; expected one of: "), e


# -- one parse, one wording: the admission rule and the reconciler's view (issue 21) ----------
@pytest.mark.parametrize(("obj", "message"), [c[1:] for c in SJ_BAD], ids=[c[0] for c in SJ_BAD])
def test_the_reconcilers_view_fails_a_bad_spec_with_the_webhooks_words(sj, obj, message):
    """A ScavengerJob stored while the webhook was down fails InvalidSpec with exactly the problems
    the webhook would have refused it with (before: a second, more lenient check of its own)."""
    from webhook.reconciler.scavenger import sj_view

    d = run(sj, obj)
    view = sj_view(obj)
    assert not d.allowed and view.need is None and view.duration is None
    assert d.message == f"scavengerjob: invalid ScavengerJob demo/md: {'; '.join(view.problems)}"
    assert message in "; ".join(view.problems)


@pytest.mark.parametrize("obj", [c[1] for c in SJ_OK], ids=[c[0] for c in SJ_OK])
def test_what_the_webhook_allows_the_view_runs(obj):
    from webhook.reconciler.scavenger import sj_view

    view = sj_view(obj)
    assert view.problems == () and view.need is not None and view.duration is not None


def test_the_parse_types_the_spec():
    from webhook.rules.scavengerjob import SJSpec, parse_scavengerjob

    assert parse_scavengerjob(sjob()) == SJSpec(problems=(), pods=2, cpu_milli=4000, memory=8 * 2**30,
                                                duration=1800, checkpoint_code=None, checkpoint_interval=None)
    p = parse_scavengerjob(sjob(pods=..., duration=..., checkpoint={"interval": "10m"},
                                resources={"limits": {"cpu": "1500m", "memory": "1.5Ki"}}))
    assert (p.pods, p.cpu_milli, p.memory, p.duration, p.checkpoint_interval) == (1, 1500, 1536, 600, 600)
    assert parse_scavengerjob(sjob(checkpointExitCode=3)).checkpoint_code == 3
    bad = parse_scavengerjob(sjob(pods=0))
    assert bad.problems and (bad.pods, bad.cpu_milli, bad.duration) == (None, None, None)


@pytest.mark.parametrize("obj", [
    sjob(priority=100),  # an unknown field
    sjob(resources={"limits": {"cpu": "4", "memory": "8Gi"}, "requests": {"cpu": "2", "memory": "8Gi"}}),
    sjob(runAsUser=0),
    sjob(volumes=vol(name="b", mountPath="/b", hostPath={"path": "/"})),
], ids=["unknown field", "requests below limits", "root", "hostPath"])
def test_the_view_is_as_strict_as_the_webhook(obj):
    """Before, the view ran these (stored while the webhook was down); now it fails them InvalidSpec."""
    from webhook.reconciler.scavenger import sj_view

    assert sj_view(obj).problems == tuple(scavengerjob_problems(obj)) != ()


def test_the_view_keeps_at_most_twenty_problems():
    from webhook.reconciler.scavenger import sj_view

    obj = sjob(command=list(range(30)))
    assert len(scavengerjob_problems(obj)) == 30
    problems = sj_view(obj).problems
    assert problems[:20] == tuple(scavengerjob_problems(obj)[:20]) and problems[20:] == ("... and 10 more problems",)
