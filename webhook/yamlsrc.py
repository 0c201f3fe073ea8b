"""YAML with source positions, and a strict reader that turns it into settings.

Admins edit the policy bundle by hand, so every error must point at the file,
line and field to fix (``policies/shm/policy.yaml:12: spec.settings.size:
expected a quantity``). PyYAML's composer knows the line of every node; this
module keeps it next to the plain data while the bundle is validated, and the
resulting settings objects carry no YAML at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml

try:  # the C loader is several times faster; fall back silently when absent
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader



# Safe loading as the API server sees a manifest: YAML becomes JSON, so a value that YAML reads
# as a date or time (``2024-01-01``) stays the string it is in JSON. (Made with type(): the
# loader class is chosen at run time, and mypy strict refuses a class statement on it.)
_ManifestLoader: Any = type("_ManifestLoader", (_Loader,), {})


_ManifestLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)

T = TypeVar("T")
D = TypeVar("D")
S = TypeVar("S", bound=str)
Str = str  # Node.str() shadows the builtin inside the class body


class BundleError(Exception):
    """A policy bundle that cannot be loaded; the message names file, line and field."""

    def __init__(self, file: str, line: int | None, field: str, message: str) -> None:
        self.file, self.line, self.field, self.message = file, line, field, message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


# Bounds on what one YAML text may make us build. A bundle or a manifest nests a dozen
# levels at most; PyYAML's composer recurses once per level (libyaml's in C, so a deep
# enough text crashes the process instead of raising), and an alias names a whole
# subtree, so a few lines of anchors expand to billions of nodes ("billion laughs").
# The node and size bounds are per object (a document, or one of the items of a document's
# top-level ``items:``, as in a ``kind: List`` dump), so a dump of a thousand objects is read
# like a thousand files; the whole text has its own, larger node bound.
MAX_DEPTH = 64
MAX_NODES = 200_000  # nodes of one object after alias expansion
MAX_OBJECT_BYTES = 3 * 1024 * 1024  # characters of one object: the API server's limit on a request body
MAX_INPUT_NODES = 5_000_000  # nodes of the whole text after alias expansion
MAX_INPUT_BYTES = 128 * 1024 * 1024  # one manifest file (or stdin) for `batchgate check`
MAX_BYTES = 4 * 1024 * 1024  # a ConfigMap holds 1 MiB; a bundle file is far smaller


def size_text(n: int) -> str:
    """A limit in bytes as its message names it: ``3 MiB``."""
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n} bytes"


def check_shape(text: str, name: str) -> None:
    """Refuse, before anything is composed, a text nested deeper than MAX_DEPTH, an object
    (a document, or an item of a document's top-level ``items:``) expanding (aliases included)
    to more than MAX_NODES nodes or spanning more than MAX_OBJECT_BYTES characters, or a whole
    text of more than MAX_INPUT_NODES nodes; also any syntax error.

    Walks the parser's event stream, which keeps no recursion and stops at the first
    object too deep or too big, so a 50 MB object is refused after its first 3 MiB."""
    sizes: dict[str, int] = {}  # anchor -> expanded size of the node it names
    stack: list[tuple[str | None, int]] = []  # open collections: (anchor, size so far)
    total = 0
    start, first, nodes = 0, 1, 0  # the current object: where it starts (index, line), its nodes so far
    saved = (0, 1, 0)  # the document's own (start, first, nodes) while one of its items is read
    item_seq = False  # the document's top-level `items:` sequence is open (stack depth 2)
    root_map, key_next, last_key = False, True, None  # the root mapping's keys and values alternate
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.DocumentStartEvent):
                (start, first), nodes = _pos(event.start_mark), 0
                item_seq, key_next, last_key = False, True, None
                root_map = False
                continue
            depth = len(stack)
            if isinstance(event, yaml.CollectionStartEvent):
                if depth >= MAX_DEPTH:
                    raise BundleError(name, _line(event), "",
                                      f"nested more than {MAX_DEPTH} levels deep")
                if depth == 0:
                    root_map = isinstance(event, yaml.MappingStartEvent)
                elif depth == 1 and root_map and not key_next and last_key == "items" \
                        and isinstance(event, yaml.SequenceStartEvent):
                    item_seq = True
                elif depth == 2 and item_seq:  # an item starts: an object of its own
                    saved = (start, first, nodes)
                    (start, first), nodes = _pos(event.start_mark), 0
                stack.append((event.anchor, 1))
                total += 1
                nodes += 1
                if depth == 1 and root_map:
                    key_next = not key_next
                continue
            if isinstance(event, yaml.CollectionEndEvent):
                anchor, size = stack.pop()
                depth -= 1
            elif isinstance(event, yaml.ScalarEvent):
                anchor, size = event.anchor, 1
                if depth == 1 and root_map:
                    if key_next:
                        last_key = event.value
                    key_next = not key_next
            elif isinstance(event, yaml.AliasEvent):
                anchor, size = None, sizes.get(event.anchor or "", 1)
                if depth == 1 and root_map:
                    key_next = not key_next
            else:
                continue
            if anchor:
                sizes[anchor] = size
            if stack:
                stack[-1] = (stack[-1][0], stack[-1][1] + size)
            if not isinstance(event, yaml.CollectionEndEvent):
                total += size
                nodes += size
            item = item_seq and (depth >= 3 or (depth == 2 and isinstance(event, yaml.CollectionEndEvent)))
            if nodes > MAX_NODES:
                raise BundleError(name, _line(event), "",
                                  f"the {'list item' if item else 'document'} starting at line {first} expands to more than {MAX_NODES} nodes (aliases included)")
            if (item or not item_seq) and _pos(event.end_mark)[0] - start > MAX_OBJECT_BYTES:
                raise BundleError(name, _line(event), "",
                                  f"the {'list item' if item else 'document'} starting at line {first} is larger than {size_text(MAX_OBJECT_BYTES)}, the most the API server "
                                  "takes in one request")
            if total > MAX_INPUT_NODES:
                raise BundleError(name, _line(event), "",
                                  f"expands to more than {MAX_INPUT_NODES} nodes in all (aliases included); "
                                  "split the input")
            if isinstance(event, yaml.CollectionEndEvent):
                if depth == 2 and item_seq:  # the item ended: back to its document
                    start, first, nodes = saved
                elif depth == 1 and item_seq:
                    item_seq = False
                    # the rest of the document is measured on its own
                    start, first = _pos(event.end_mark)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise BundleError(name, mark.line + 1 if mark else None, "",
                          f"invalid YAML: {e.problem or e.context}") from e
    except yaml.reader.ReaderError as e:  # a character YAML does not allow: it knows the offset only
        raise BundleError(name, text.count("\n", 0, e.position) + 1, "",
                          f"invalid YAML: {e.reason} (character {e.character!r})") from e
    except yaml.YAMLError as e:
        raise BundleError(name, None, "", f"invalid YAML: {e}") from e


def _pos(mark: Any) -> tuple[int, int]:
    """(character index, line) of a parser mark; libyaml's events always have one."""
    return (mark.index, mark.line + 1) if mark is not None else (0, 1)


def _line(event: yaml.Event) -> int | None:
    return event.start_mark.line + 1 if event.start_mark is not None else None


def load_documents(text: str, name: str = "<input>") -> list[Any]:
    """Plain multi-document load (manifests, samples): no positions needed. Bounded like
    the bundle (:func:`check_shape`); a value YAML cannot construct (an unknown tag) is a
    BundleError with its line, never a crash. Values YAML reads as dates or times stay the
    strings they are in JSON, as the API server sees them."""
    check_shape(text, name)
    try:
        return [d for d in yaml.load_all(text, Loader=_ManifestLoader) if d is not None]
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise BundleError(name, mark.line + 1 if mark else None, "", f"invalid YAML: {e.problem or e.context}") from e
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as e:
        read_text(text, name)  # the slow, positioned reader names the line of the bad value
        raise BundleError(name, None, "", f"cannot read a value: {e}") from e


@dataclass(frozen=True, slots=True)
class Node:
    """A value read from a YAML file, with where it came from."""

    value: Any
    file: str
    line: int
    path: str  # dotted field path, e.g. "spec.settings.size" or "queues[1].name"
    lines: dict[Any, int] | None = None  # line of each child key / index

    # -- navigation -------------------------------------------------------
    def fail(self, message: Str) -> NoReturn:
        raise BundleError(self.file, self.line, self.path, message)

    def _child(self, key: Any, value: Any) -> Node:
        line = (self.lines or {}).get(key, self.line)
        sub = f"{self.path}.{key}" if isinstance(key, Str) else f"{self.path}[{key}]"
        if not self.path:
            sub = str(key)
        lines = getattr(value, "_lines", None)
        return Node(value, self.file, line, sub, lines)

    def mapping(self, *, allowed: tuple[Str, ...] | None = None) -> Node:
        if not isinstance(self.value, dict):
            self.fail(f"expected a mapping, got {_kind(self.value)}")
        if allowed is not None:
            for key in self.value:
                if key not in allowed:
                    self._child(key, None).fail(
                        f"unknown field; expected one of: {', '.join(allowed)}"
                    )
        return self

    def get(self, key: Str) -> Node | None:
        self.mapping()
        if key not in self.value or self.value[key] is None:
            return None
        return self._child(key, self.value[key])

    def opt(self, key: Str, read: Callable[[Node], T], default: D) -> T | D:
        """``read`` applied to field ``key``, or ``default`` when the field is absent or null:
        ``node.opt("adminOnly", Node.bool, False)``."""
        node = self.get(key)
        return default if node is None else read(node)

    def each(self, key: Str) -> list[Node]:
        """The items of the list in field ``key``; none when the field is absent or null."""
        node = self.get(key)
        return [] if node is None else node.seq()

    def req(self, key: Str) -> Node:
        node = self.get(key)
        if node is None:
            raise BundleError(self.file, self.line, _join(self.path, key), "required field is missing")
        return node

    def items(self) -> Iterator[tuple[Str, Node]]:
        self.mapping()
        for key, value in self.value.items():
            yield str(key), self._child(key, value)

    def seq(self) -> list[Node]:
        if not isinstance(self.value, list):
            self.fail(f"expected a list, got {_kind(self.value)}")
        return [self._child(i, v) for i, v in enumerate(self.value)]

    # -- scalars ----------------------------------------------------------
    def str(self, *, pattern: Str | None = None, hint: str = "") -> Str:
        if not isinstance(self.value, Str) or not self.value:
            self.fail(f"expected a non-empty string, got {_kind(self.value)}")
        if pattern and not re.fullmatch(pattern, self.value):
            self.fail(f"{self.value!r} is not valid{': ' + hint if hint else ''}")
        return self.value

    def int(self, *, minimum: int | None = None, maximum: int | None = None) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            self.fail(f"expected an integer, got {_kind(self.value)}")
        if minimum is not None and self.value < minimum:
            self.fail(f"must be >= {minimum}, got {self.value}")
        if maximum is not None and self.value > maximum:
            self.fail(f"must be <= {maximum}, got {self.value}")
        return self.value

    def bool(self) -> bool:
        if not isinstance(self.value, bool):
            self.fail(f"expected true or false, got {_kind(self.value)}")
        return self.value

    def enum(self, *choices: S) -> S:
        for choice in choices:
            if self.value == choice:
                return choice
        self.fail(f"expected one of {', '.join(choices)}, got {self.value!r}")

    def str_list(self) -> tuple[Str, ...]:
        return tuple(n.str() for n in self.seq())

    def str_map(self) -> dict[Str, Str]:
        out: dict[Str, Str] = {}
        for key, node in self.items():
            if isinstance(node.value, bool | int | float):
                node.fail("expected a string (quote it in YAML)")
            out[key] = node.str()
        return out

    def parsed(self, parse: Callable[[Str], T], *, expected: Str) -> T:
        """Parse a scalar with ``parse``; a ValueError becomes an error at this field."""
        raw = self.value if isinstance(self.value, Str) else str(self.value)
        if isinstance(self.value, bool) or self.value is None:
            self.fail(f"expected {expected}, got {_kind(self.value)}")
        try:
            return parse(raw)
        except ValueError as e:
            self.fail(f"expected {expected}: {e}")


def read_file(path: Path, *, display: str | None = None) -> list[Node]:
    """Load every YAML document of ``path`` as positioned Nodes."""
    name = display or str(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise BundleError(name, None, "", f"larger than {MAX_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise BundleError(name, None, "", f"cannot read: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise BundleError(name, None, "", "not UTF-8 text") from e
    return read_text(text, name)


def read_text(text: str, name: str) -> list[Node]:
    check_shape(text, name)
    try:
        roots = list(yaml.compose_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise BundleError(name, line, "", f"invalid YAML: {e.problem or e.context}") from e
    except yaml.YAMLError as e:
        raise BundleError(name, None, "", f"invalid YAML: {e}") from e
    constructor = yaml.SafeLoader("")
    out = []
    for root in roots:
        if root is None:
            continue
        value = _convert(root, constructor, name)
        out.append(Node(value, name, root.start_mark.line + 1, "", getattr(value, "_lines", None)))
    return out


# -- internals -------------------------------------------------------------
class _Map(dict[Any, Any]):
    __slots__ = ("_lines",)
    _lines: dict[Any, int]


class _Seq(list[Any]):
    __slots__ = ("_lines",)
    _lines: dict[Any, int]


_COLLECTION_TAGS: dict[type[yaml.Node], str] = {
    yaml.MappingNode: "tag:yaml.org,2002:map", yaml.SequenceNode: "tag:yaml.org,2002:seq"}


def _convert(node: yaml.Node, constructor: yaml.SafeLoader, name: str) -> Any:
    plain_tag = _COLLECTION_TAGS.get(type(node))
    if plain_tag is not None and node.tag != plain_tag:
        raise BundleError(name, node.start_mark.line + 1, "",
                          f"could not determine a constructor for the tag {node.tag!r}")
    if isinstance(node, yaml.MappingNode):
        m = _Map()
        m._lines = {}
        for k_node, v_node in node.value:
            key = _convert(k_node, constructor, name)
            if isinstance(key, dict | list):
                raise BundleError(name, k_node.start_mark.line + 1, "", "mapping keys must be scalars")
            if key in m:
                raise BundleError(name, k_node.start_mark.line + 1, str(key), "duplicate key")
            m[key] = _convert(v_node, constructor, name)
            m._lines[key] = k_node.start_mark.line + 1
        return m
    if isinstance(node, yaml.SequenceNode):
        s = _Seq(_convert(n, constructor, name) for n in node.value)
        s._lines = {i: n.start_mark.line + 1 for i, n in enumerate(node.value)}
        return s
    try:
        return constructor.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as e:
        # an unknown tag (!foo), an impossible date (2024-13-45), ...
        problem = getattr(e, "problem", None) or str(e)
        raise BundleError(name, node.start_mark.line + 1, "",
                          f"cannot read {node.value!r} as {node.tag.rsplit(':', 1)[-1]}: {problem}") from e


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
