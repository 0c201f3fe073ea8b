"""The copy-on-write draft and the JSONPatch it produces, checked with jsonpatch as oracle."""

from __future__ import annotations

import copy
import json

import jsonpatch
import pytest

from webhook.draft import Draft, make_patch

BASE = {
    "metadata": {"name": "p", "labels": {"a": "1"}},
    "spec": {
        "volumes": [{"name": "tok", "secret": {"secretName": "t"}}, {"name": "data", "emptyDir": {}}],
        "containers": [{"name": "c", "volumeMounts": [{"name": "tok", "mountPath": "/var/run"}]}],
        "priority": 0,
    },
}


def edits_add_label(d: Draft) -> None:
    d.set("metadata", "labels", "batchgate.io/queue", "batch")


def edits_new_annotations(d: Draft) -> None:
    d.set("metadata", "annotations", "x/y~z", "1")


def edits_remove_first_volume(d: Draft) -> None:
    vols = d.edit("spec", "volumes")
    del vols[0]
    d.edit("spec", "containers", 0, "volumeMounts").clear()


def edits_append_and_remove(d: Draft) -> None:
    vols = d.edit("spec", "volumes")
    del vols[0]
    vols.append({"name": "shm", "emptyDir": {"medium": "Memory"}})


def edits_replace_scalar(d: Draft) -> None:
    d.set("spec", "priority", 1000)


def edits_delete_key(d: Draft) -> None:
    d.delete("metadata", "labels", "a")


def edits_nothing_real(d: Draft) -> None:
    d.set("spec", "priority", 0)


def edits_int_to_bool(d: Draft) -> None:
    d.set("spec", "priority", False)  # 0 == False in Python; JSON knows better


CASES = [edits_add_label, edits_new_annotations, edits_remove_first_volume, edits_append_and_remove,
         edits_replace_scalar, edits_delete_key, edits_nothing_real, edits_int_to_bool]


@pytest.mark.parametrize("edit", CASES, ids=lambda f: f.__name__)
def test_patch_turns_original_into_draft(edit):
    original = copy.deepcopy(BASE)
    frozen = json.dumps(original, sort_keys=True)
    d = Draft(original)
    edit(d)
    assert json.dumps(original, sort_keys=True) == frozen, "the original must never change"
    patch = d.patch()
    assert jsonpatch.apply_patch(copy.deepcopy(BASE), patch) == d.root
    assert json.dumps(jsonpatch.apply_patch(copy.deepcopy(BASE), patch)) == json.dumps(d.root)


def test_untouched_subtrees_are_shared_not_copied():
    d = Draft(BASE)
    d.set("metadata", "labels", "q", "x")
    assert d.root["spec"] is BASE["spec"]
    assert d.root["metadata"] is not BASE["metadata"]


def test_no_edit_no_patch():
    assert Draft(BASE).patch() == []
    assert make_patch(BASE, copy.deepcopy(BASE)) == []


def test_removal_is_expressed_as_remove_ops():
    d = Draft(BASE)
    del d.edit("spec", "volumes")[0]
    assert d.patch() == [{"op": "remove", "path": "/spec/volumes/0"}]


def test_keys_are_escaped():
    d = Draft({"metadata": {"labels": {}}})
    d.set("metadata", "labels", "a/b~c", "v")
    assert d.patch() == [{"op": "add", "path": "/metadata/labels/a~1b~0c", "value": "v"}]


def test_reset_forgets_every_edit():
    d = Draft(BASE)
    d.set("spec", "priority", 5)
    d.edit("spec", "volumes").clear()
    d.reset()
    assert d.root is BASE and d.patch() == []
    d.set("spec", "priority", 7)  # and it is usable again
    assert d.patch() == [{"op": "replace", "path": "/spec/priority", "value": 7}]


def test_edit_creates_missing_containers():
    d = Draft({"spec": {}})
    d.edit("spec", "containers", create=list).append({"name": "x"})
    assert d.root == {"spec": {"containers": [{"name": "x"}]}}


def test_edit_through_a_scalar_is_an_error():
    d = Draft({"spec": {"priority": 1}})
    with pytest.raises(TypeError):
        d.edit("spec", "priority", "x")


def test_ensure_leaves_an_equal_value_alone_and_sets_a_different_one():
    original = copy.deepcopy(BASE)
    same = Draft(original)
    same.ensure("metadata", "labels", "a", "1")
    assert same.patch() == []
    assert same.get("metadata") is original["metadata"]  # nothing copied for nothing

    other = Draft(original)
    other.ensure("metadata", "labels", "a", "2")
    other.ensure("metadata", "annotations", "new", "x")
    patch = other.patch()
    assert jsonpatch.apply_patch(original, patch) == {
        **original, "metadata": {"name": "p", "labels": {"a": "2"}, "annotations": {"new": "x"}}}
    assert original == BASE



def test_a_replaced_copy_never_lends_its_id_to_an_object_from_outside():
    """A copy the draft made and a rule then replaced is freed; an object made later (a list
    memoised by a rule, say) may be given the same address. Were the draft to remember copies
    by id alone, it would take such an object for its own copy and change it in place."""
    draft = Draft({"spec": {"volumes": [{"name": "a"}]}})
    draft.edit("spec", "volumes").append({"name": "b"})  # the draft's copy of the list
    made_after: list[list[dict[str, str]]] = []
    draft.edit("spec")["volumes"] = None  # replaced: nothing else holds the copy
    for _ in range(500):  # CPython hands out a freed list's memory to the next list made
        made_after.append([{"name": "kept"}])
    for shared in made_after:
        draft.edit("spec")["volumes"] = shared
        draft.edit("spec", "volumes").append({"name": "c"})
    assert all(shared == [{"name": "kept"}] for shared in made_after)
    assert draft.root["spec"]["volumes"] == [{"name": "kept"}, {"name": "c"}]
