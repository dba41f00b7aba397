"""Reading the YAML files a user hands us (job files, schema files): one line per refusal, in
bounded time and memory.

Why not `yaml.safe_load`: it is safe against code execution, not against size. It shares an
aliased node's object wherever the alias is used, so nine levels of nine aliases each (the
"billion laughs") parse in a millisecond into a document that only blows up later, when the
document is walked or dumped (3.3 GB, then an empty MemoryError). It also keeps the last of two
equal keys without a word, and its errors run to four lines with an excerpt of the file. Here:

* a file over MAX_BYTES is refused before it is parsed;
* the composed node graph (aliases are shared nodes in it, so it is as small as the file) is
  measured as if every alias were expanded, memoised per node, and refused beyond MAX_EXPANDED
  values; an alias inside its own anchor (an endless document) is refused too;
* a mapping with two equal keys is refused, naming both lines (merge keys `<<` may still be
  overridden: that is what they are for);
* every YAMLError, and a value a tag cannot hold (`2020-13-45` read as a date), becomes one
  line naming the file, the 1-based line and column, and the parser's own words.
"""

from __future__ import annotations

import contextlib
import gc
import re
from collections.abc import Iterator
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from etl.base.errors import ConfigError, EtlError

MAX_BYTES = 16 * 2**20  # a 10,000-feature schema, a description each, is about 1.5 MB
MAX_EXPANDED = 1_000_000  # values the aliases may add, beyond the file's own
_MERGE = "tag:yaml.org,2002:merge"
_UNKNOWN_TAG = re.compile(r"could not determine a constructor for the tag '(.*)'$")
_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")  # YAML 1.1's line breaks, as PyYAML's

# libyaml's parser when PyYAML was built with it (faster, and it caps nesting at 1000 levels
# where the pure-Python parser runs out of stack near 300); both take the constructor hooks below.
_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Refused(Exception):
    """A document we refuse although it parses: `line` is 1-based."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(reason)
        self.line, self.reason = line, reason


class _BoundedLoader(_BASE):  # type: ignore[misc]
    """SafeLoader that measures and checks the composed graph before building a collection."""

    def construct_document(self, node: Node) -> Any:
        self._check(node)
        return super().construct_document(node)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        # A tag's constructor raises a bare ValueError for a value it cannot hold (`!!int x`,
        # a plain `2020-13-45` resolved as a timestamp): give it the node's position.
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError) as e:
            kind = node.tag.rsplit(":", 1)[-1]
            shown = f" {node.value!r}" if isinstance(node, ScalarNode) else ""
            raise ConstructorError(None, None, f"cannot read{shown} as {kind}: {_first_line(e)}",
                                   node.start_mark) from e

    def _check(self, root: Node) -> None:
        """One walk over the distinct collections, in document order: duplicate keys when a
        mapping is first met; when a collection is done, its size with every alias expanded
        (its children's are known by then), against the values the file itself writes (one per
        child of a distinct collection). No recursion: libyaml allows 1000 levels of nesting."""
        size: dict[int, int] = {}  # by id, collections only: a scalar is 1
        open_nodes: set[int] = set()
        written = 1
        stack: list[tuple[Node, list[Node] | None]] = [(root, None)]
        while stack:
            node, children = stack.pop()
            key = id(node)
            if children is not None:  # done: every child collection is measured
                open_nodes.discard(key)
                size[key] = 1 + sum(size.get(id(c), 1) for c in children)
                if size[key] - written > MAX_EXPANDED:
                    raise _Refused(node.start_mark.line + 1, "the document expands to more than "
                                   f"{MAX_EXPANDED:,} values through its aliases (&anchor/*alias);"
                                   " refusing it")
                continue
            if key in size or isinstance(node, ScalarNode):
                continue  # an alias to a collection already measured: counting it again is free
            if key in open_nodes:
                raise _Refused(node.start_mark.line + 1, "an alias (*alias) lies inside its own "
                               "anchor (&anchor), so the document never ends; refusing it")
            if isinstance(node, MappingNode):
                self._unique_keys(node)
            children = _children(node)
            written += len(children)
            open_nodes.add(key)
            stack.append((node, children))
            stack.extend((c, None) for c in reversed(children) if not isinstance(c, ScalarNode))

    def _unique_keys(self, node: MappingNode) -> None:
        # Keys compared as the values they construct to (`1` and `0x1`, `yes` and `true` are
        # one key each), checked before any merge key (`<<`) is flattened into the mapping.
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE:
                continue  # a collection as a key fails on its own: unhashable
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            try:
                again = key in first
            except TypeError:  # unhashable: the constructor refuses it in its own words
                continue
            if again:
                raise _Refused(line, f"duplicate key {key_node.value!r} (first at line {first[key]})")
            first[key] = line


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused while a document is parsed, as it was before
    afterwards. Parsing makes a few objects per value and frees none until the end, so every
    collection in between walks all of them for nothing, a cost that grows faster than the
    document (figures: benchmarks/README.md, "Bounded work"). The document is bounded
    (MAX_BYTES, MAX_EXPANDED), so is what waits."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _problem(e: yaml.MarkedYAMLError, lines: list[str]) -> str:
    """The parser's own words on one line, a character it names shown as itself."""
    mark = e.problem_mark
    line = lines[mark.line] if mark is not None and mark.line < len(lines) else ""
    here = line[mark.column:] if mark is not None else ""
    if here.startswith("\t"):  # libyaml and PyYAML word a misplaced tab differently
        if not line[:mark.column].strip(" "):
            return "found a tab character where indentation is expected (YAML indents with spaces)"
        return "found a tab character where YAML does not allow one"
    problem = (e.problem or e.context or "not valid YAML").strip().replace("\n", " ")
    unknown = _UNKNOWN_TAG.match(problem)
    if unknown:  # !!python/object..., !include, ...: SafeLoader builds plain values only
        tag = unknown.group(1).replace("tag:yaml.org,2002:", "!!")
        return (f"the tag {tag!r} is refused: only plain YAML values are read (no Python "
                "objects, no !include of other files, no custom tags)")
    if problem == "found character that cannot start any token" and here:
        problem = f"found character {here[0]!r} that cannot start any token"  # libyaml omits it
    if problem == "found undefined alias" and here.startswith("*"):
        problem += f" {here[1:].split()[0].rstrip(',]}')!r}"
    if e.problem and e.context:
        cm = e.context_mark
        where = (f" that starts at line {cm.line + 1}" if e.context.startswith("while ")
                 and cm is not None and mark is not None and cm.line != mark.line else "")
        problem += f" ({e.context}{where})"
    return problem


def load_yaml(text: str, path: str, what: str, error: type[EtlError] = ConfigError) -> Any:
    """The document in `text`, read from `path` (a `what`: "job file", "schema file"), or
    `error` with one line naming the file and, where there is one, the 1-based line:
    `PATH:LINE: duplicate key ...`, `PATH: not valid YAML: line L, column C: ...`."""
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > MAX_BYTES:
        raise error(f"{path}: the {what} is {size / 2**20:.1f} MiB, more than the "
                    f"{MAX_BYTES // 2**20} MiB a {what} may be; refusing it")
    text = text.removeprefix("\ufeff")  # both parsers skip it; the error columns then agree
    try:
        with _no_gc():
            return yaml.load(text, Loader=_BoundedLoader)  # a SafeLoader: no python/ tags
    except _Refused as e:
        raise error(f"{path}:{e.line}: {e.reason}") from e
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise error(f"{path}: not valid YAML: {where}{_problem(e, _LINE_BREAK.split(text))}"
                    ) from e
    except yaml.YAMLError as e:  # the reader's: a character YAML does not allow
        position = getattr(e, "position", None)
        where = (f"line {len(_LINE_BREAK.findall(text, 0, position)) + 1}: "
                 if isinstance(position, int) else "")
        raise error(f"{path}: not valid YAML: {where}{_first_line(e)}") from e
    except RecursionError as e:
        raise error(f"{path}: not valid YAML: nested too deeply") from e


def top_key_line(text: str, key: str) -> int | None:
    """1-based line of `key` at the top of the mapping document `text` (already accepted by
    `load_yaml`), for a message about its value; None when it is not there as written."""
    try:
        with _no_gc():
            root = yaml.compose(text, Loader=_BASE)
    except yaml.YAMLError:
        return None
    if not isinstance(root, MappingNode):
        return None
    return next((k.start_mark.line + 1 for k, _ in root.value
                 if isinstance(k, ScalarNode) and k.value == key), None)
