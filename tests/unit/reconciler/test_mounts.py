"""A missing Secret, told by the kubelet's FailedMount Event (webhook/reconciler/mounts.py), fails the
ScavengerJob that mounts it, naming it; nothing else an Event says does."""

from __future__ import annotations

from typing import Any

import pytest
from reconbuild import T0, running
from test_scavenger_controller import World, sj

from webhook.reconciler.mounts import (
    EVENT_FIELDS,
    MAX_MESSAGE,
    MountFailure,
    missing_secret,
    mount_failure_view,
)

PREFIX = 'MountVolume.SetUp failed for volume "creds" : '


@pytest.mark.parametrize(("message", "want"), [
    # kubelets with the watch-based Secret manager (the resource's singular)
    (PREFIX + 'secret "db-pass" not found', ("creds", "db-pass")),
    # kubelets that GET Secrets (the API's NotFound: the plural)
    (PREFIX + 'secrets "db-pass" not found', ("creds", "db-pass")),
    # a projected volume's errors, as a list, the Secret's not first
    ('MountVolume.SetUp failed for volume "all-in-one" : [configmap "cfg" not found, secret "tls.v2" not found]',
     ("all-in-one", "tls.v2")),
    ('MountVolume.SetUp failed for volume "x" : [secret "a" not found, secret "b" not found]', ("x", "a")),
], ids=["secret", "secrets", "projected-list", "two-in-a-list"])
def test_the_kubelets_wordings_name_the_volume_and_the_secret(message, want):
    assert missing_secret(message) == want


@pytest.mark.parametrize("message", [
    None, 7, "", "secret \"db-pass\" not found",
    PREFIX + 'configmap "db-pass" not found',  # not a Secret (ConfigMaps are looked up before a start)
    PREFIX + 'object "demo"/"db-pass" not registered',  # the kubelet's cache, not yet told of the pod: transient
    PREFIX + "couldn't propagate object cache: timed out waiting for the condition",
    'Unable to attach or mount volumes: unmounted volumes=[creds], unattached volumes=[creds]: timed out waiting '
    'for the condition; secret "db-pass" not found',
    PREFIX + 'Couldn\'t get secret demo/x: secret "db-pass" not found',  # not the NotFound itself
    PREFIX + 'secret "DB_PASS" not found',  # no Secret can have that name
    PREFIX + 'secret "../../etc/passwd" not found',
    PREFIX + 'secret "' + "a" * 254 + '" not found',  # longer than any name
    PREFIX + 'secret "db-pass" found',
    'MountVolume.SetUp failed for volume "Creds" : secret "db-pass" not found',  # no volume has that name
    'MountVolume.SetUp failed for volume "c\\" : secret \\"x" : secret "db-pass" not found',
    "x" * MAX_MESSAGE + PREFIX + 'secret "db-pass" not found',  # read no further than MAX_MESSAGE
    PREFIX + "[" + "secret " * 100_000 + '"a" not found',  # 700 KB, no backtracking blow-up
    "MountVolume.SetUp failed for volume \"creds\" : ",
], ids=lambda m: repr(m)[:40])
def test_anything_else_names_no_secret(message):
    assert missing_secret(message) is None


def kubelet_event(message: str = PREFIX + 'secret "md-creds" not found', *, pod: str = "md-1-0",
                  uid: str = "uid-pod", host: str = "n0", **over: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{pod}.17f0", "namespace": "demo"},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": "demo", "uid": uid},
        "reason": "FailedMount", "type": "Warning", "message": message,
        "source": {"component": "kubelet", "host": host}, "reportingComponent": "kubelet", "reportingInstance": host}
    ev.update(over)
    return ev


def test_the_view_keeps_a_kubelets_warning_about_a_pod_and_nothing_else():
    assert mount_failure_view(kubelet_event()) == MountFailure("demo", "uid-pod", "md-1-0", "creds", "md-creds", "n0")
    assert mount_failure_view(kubelet_event(type="Normal")) is None
    assert mount_failure_view(kubelet_event(reason="FailedAttachVolume")) is None
    assert mount_failure_view(kubelet_event(involvedObject={"kind": "Node", "name": "n0"})) is None
    assert mount_failure_view(kubelet_event(source={"component": "alice"}, reportingComponent="alice")) is None
    assert mount_failure_view(kubelet_event(message="something else")) is None
    assert mount_failure_view(kubelet_event(source=[], reportingComponent="kubelet", involvedObject="x")) is None
    # only reportingComponent (events.k8s.io writers): the host is its reportingInstance
    v = mount_failure_view(kubelet_event(source=None))
    assert v is not None and v.host == "n0"
    # what no name can be is cut past any name: it equals none, and is not kept whole
    v = mount_failure_view(kubelet_event(pod="p" * 100_000, uid="u" * 100_000))
    assert v is not None and len(v.pod_name) == 254 and len(v.pod_uid) == 37
    assert EVENT_FIELDS == "involvedObject.kind=Pod,reason=FailedMount,type=Warning,source=kubelet"


CREDS = [{"name": "creds", "mountPath": "/etc/creds", "secret": {"secretName": "md-creds"}}]


def _waiting_to_mount(w: World) -> str:
    """Started: its Job's pods bound to n0, waiting in ContainerCreating. Returns a pod's uid."""
    w.step()
    assert w.step() == ["sj-start"]
    w.run_job("md-1", phase="Pending")
    assert w.step() == []
    return str(w.api.objects[("pods", "demo", "md-1-0")]["metadata"]["uid"])


def test_the_kubelets_word_that_a_secret_it_mounts_is_missing_fails_it_naming_the_secret():
    w = World(sj("md", volumes=CREDS))
    uid = _waiting_to_mount(w)
    w.api.put(kubelet_event(uid=uid))
    assert w.step() == ["sj-failed"]
    st = w.sj("md")["status"]
    assert st["phase"] == "Failed"
    assert st["message"] == ("Secret demo/md-creds does not exist (the kubelet cannot mount volume 'creds' of pod "
                             "md-1-0: FailedMount); the ScavengerJob cannot run without it")
    assert [c["reason"] for c in st["conditions"] if c["type"] == "Finished"] == ["MissingVolumeSource"]
    assert "md-1" not in w.jobs()
    assert any("Secret demo/md-creds does not exist" in m for m in w.events("Failed"))
    assert w.step(3600) == []


@pytest.mark.parametrize("event", [
    dict(message=PREFIX + 'secret "other" not found'),  # a Secret it does not mount
    dict(message='MountVolume.SetUp failed for volume "other" : secret "md-creds" not found'),  # not on that volume
    dict(host="n1"),  # not from the kubelet of the pod's node
    dict(uid="uid-someone-elses-pod"),
    dict(source={"component": "alice", "host": "n0"}, reportingComponent="alice"),
    dict(type="Normal"),
], ids=["other-secret", "other-volume", "other-node", "other-pod", "not-the-kubelet", "normal"])
def test_an_event_that_is_not_the_kubelets_word_about_its_pod_and_secret_changes_nothing(event):
    w = World(sj("md", volumes=CREDS))
    uid = _waiting_to_mount(w)
    w.api.put(kubelet_event(**{"uid": uid, **event}))
    assert w.step() == []
    assert w.sj("md")["status"]["phase"] != "Failed" and "md-1" in w.jobs()


def test_a_running_pod_is_not_failed_by_an_old_event():
    """The Secret was made meanwhile: the pod runs, and the Event from before says nothing now."""
    w = World(sj("md", volumes=CREDS))
    uid = _waiting_to_mount(w)
    w.api.put(kubelet_event(uid=uid))
    for p in w.pods("md-1"):
        w.set_pod(p["metadata"]["name"], phase="Running", containerStatuses=[running(w.now - T0)])
    assert w.step(60) == ["sj-running"]
