"""Copy-on-write editing of a JSON object, and the one place JSONPatches are built.

Rules never touch the object the API server sent. They ask a :class:`Draft` for
the container they want to change (``draft.edit("spec", "containers", 0)``); the
draft copies, shallowly, just the containers on that path. Everything a rule did
not touch is still *the same Python object* as in the original, so the diff that
turns the draft into a JSONPatch skips whole untouched subtrees with an ``is``
check. That keeps a mutation of a Pod at tens of microseconds instead of the
hundreds a deep copy plus a generic diff would cost on the admission hot path.
"""

from __future__ import annotations

from typing import Any

JSON = Any
Path = tuple[str | int, ...]  # a field: keys and list indexes from the object's root
Owned = dict[int, Any]  # id -> the copy itself: held, so its id is never reused while the draft lives


class Draft:
    """A mutable view of ``original`` that never modifies it."""

    __slots__ = ("_owned", "edits", "original", "root")

    def __init__(self, original: dict[str, Any]) -> None:
        self.original = original
        self.root: dict[str, Any] = original
        self._owned: Owned = {}
        self.edits = 0  # edit() calls: rules edit only what they change

    # -- reading ----------------------------------------------------------
    def get(self, *path: str | int, default: Any = None) -> Any:
        if len(path) == 1:  # get(*shape.pod_spec) of a Pod, ten times a review: 2.3k, not 3.1k
            return self.root.get(path[0], default)  # type: ignore[arg-type]  # a dict: an int key is absent
        node: Any = self.root
        try:
            for key in path:
                node = node[key]
        except (KeyError, IndexError, TypeError):
            return default
        if path and isinstance(path[-1], int) and isinstance(node, str):
            return default  # indexed into a string: not a JSON path
        return node

    # -- writing ----------------------------------------------------------
    def edit(self, *path: str | int, create: type = dict) -> Any:
        """Return the container at ``path``, safe to mutate in place.

        Containers on the way are copied once per draft; missing ones are made
        (a dict, or a list where the next key is an index; ``create`` for the
        last one).
        """
        self.edits += 1
        owned = self._owned
        node: Any = self.root
        if node is self.original:  # the first edit (owned: the root and the copies below it)
            node = self.root = node.copy()
            owned[id(node)] = node
        # Hot (a rule edits a dozen paths per review): a counter, not enumerate, and one
        # ownership test per step first, the usual case.
        i = 0
        for key in path:
            try:
                child = node[key]
            except (KeyError, IndexError):
                child = None
            except TypeError:
                raise TypeError(f"cannot edit {'/'.join(map(str, path[: i + 1]))}: not a container") from None
            if id(child) not in owned:  # never None's
                if type(child) is dict or type(child) is list:
                    child = child.copy()
                elif child is None:
                    child = create() if i == len(path) - 1 else ([] if type(path[i + 1]) is int else {})
                else:
                    raise TypeError(f"cannot edit {'/'.join(map(str, path[: i + 1]))}: not a container")
                node[key] = child
                owned[id(child)] = child
            node = child
            i += 1  # noqa: SIM113 (enumerate costs more here, see above)
        return node

    def child(self, node: Any, key: str | int, *, create: type = dict) -> Any:
        """``node[key]``, safe to mutate in place, where ``node`` came from :meth:`edit` (or
        from this method): one step of ``edit`` without walking the path from the root again
        (a rule that changes several containers of one pod spec saves ~3k instructions a step)."""
        self.edits += 1
        child = node.get(key) if type(node) is dict else node[key]
        if child is None:
            child = create()
        elif id(child) in self._owned:
            return child
        elif type(child) is dict or type(child) is list:
            child = child.copy()
        else:
            raise TypeError(f"cannot edit {key}: not a container")
        node[key] = child
        self._owned[id(child)] = child
        return child

    def set(self, *path_and_value: Any) -> None:
        """``draft.set("spec", "priority", 100)``."""
        *path, key, value = path_and_value
        self.edit(*path)[key] = value

    def ensure(self, *path_and_value: Any) -> None:
        """``set`` unless the value is already there, so no parent is copied for nothing."""
        *path, value = path_and_value
        if self.get(*path) != value:
            self.set(*path, value)

    def delete(self, *path: str | int) -> None:
        *parent, key = path
        if self.get(*path, default=_MISSING) is _MISSING:
            return
        container = self.edit(*parent)
        del container[key]

    def reset(self) -> None:
        """Forget every edit: back to the original object."""
        self.root, self._owned = self.original, {}

    def patch(self) -> list[dict[str, Any]]:
        """make_patch(self.original, self.root)."""
        ops: list[dict[str, Any]] = []
        _diff(self.original, self.root, "", ops)
        return ops


_MISSING = object()


def escape(token: str | int) -> str:
    """A JSON Pointer token (RFC 6901): ``~`` as ``~0``, then ``/`` as ``~1``."""
    if type(token) is not str:
        return str(token)  # a list index
    if "~" in token:
        token = token.replace("~", "~0")
    if "/" in token:  # label and annotation keys: one replace, not two
        token = token.replace("/", "~1")
    return token


def make_patch(old: JSON, new: JSON) -> list[dict[str, Any]]:
    """A JSONPatch (RFC 6902) that turns ``old`` into ``new``."""
    ops: list[dict[str, Any]] = []
    _diff(old, new, "", ops)
    return ops


def _same(a: JSON, b: JSON) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def _diff(a: JSON, b: JSON, path: str, ops: list[dict[str, Any]]) -> None:
    if a is b:
        return
    if type(a) is dict and type(b) is dict:
        if not a.keys() <= b.keys():  # a key removed (rare): the test runs in C, the loop only then
            for key in a:
                if key not in b:
                    ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
        for key, value in b.items():
            # A JSON key is a string; escape() only where it has to (saves a call per changed key).
            if key in a:
                old = a[key]
                if old is not value:  # most keys: untouched, the very same object
                    _diff(old, value, f"{path}/{key if '/' not in key and '~' not in key else escape(key)}", ops)
            else:
                ops.append({"op": "add", "path": f"{path}/{key if '/' not in key and '~' not in key else escape(key)}",
                            "value": value})
    elif type(a) is list and type(b) is list:
        _diff_list(a, b, path, ops)
    elif type(a) is not type(b) or a != b:  # _same(a, b), a is b already ruled out
        ops.append({"op": "replace", "path": path, "value": b})


def _diff_list(a: list[Any], b: list[Any], path: str, ops: list[dict[str, Any]]) -> None:
    # Rules append to lists and remove from them; express exactly that when it is
    # what happened (readable patches, no churn on the elements that stayed).
    na, nb = len(a), len(b)
    if nb < na:
        kept = _subsequence(a, b)
        if kept is not None:
            for i in reversed(range(na)):
                if i not in kept:
                    ops.append({"op": "remove", "path": f"{path}/{i}"})
            for j, i in enumerate(sorted(kept)):
                _diff(a[i], b[j], f"{path}/{j}", ops)
            return
    common = na if na <= nb else nb
    for i in range(common):
        x, y = a[i], b[i]
        if x is y:
            continue
        if type(x) is dict and type(y) is dict and x.get("name") != y.get("name"):
            ops.append({"op": "replace", "path": f"{path}/{i}", "value": y})  # another item
        else:
            _diff(x, y, f"{path}/{i}", ops)
    if na == nb:  # the usual edit of a list: items changed in place
        return
    for i in range(common, nb):
        ops.append({"op": "add", "path": f"{path}/-", "value": b[i]})
    for i in reversed(range(common, na)):
        ops.append({"op": "remove", "path": f"{path}/{i}"})


def _subsequence(a: list[Any], b: list[Any]) -> set[int] | None:
    """Indices of ``a`` that, in order, are (or equal, or are copies edited of) ``b``.

    Only exact matches count here; an element both kept and edited is matched by
    a second pass in the caller via ``_diff``. Returns None when ``b`` is not an
    in-order selection of ``a``'s elements.
    """
    kept: set[int] = set()
    i = 0
    for item in b:
        while i < len(a) and not _same(a[i], item):
            i += 1
        if i == len(a):
            return None
        kept.add(i)
        i += 1
    return kept
