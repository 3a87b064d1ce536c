"""Read a budget file safely, and parse it with PyYAML's safe loader, keeping line numbers.

The budget loader needs the line of every key for its error messages, which plain
``yaml.safe_load`` throws away. We compose the node tree with a ``SafeLoader`` and turn
it into ``Located*`` values that remember where each key and item stood.

Everything here is bounded (see :mod:`latency_budget._config.limits`): the file is read
without blocking (a FIFO or a device is refused before a byte is read), only up to a
size cap, and nesting, alias expansion and integer size are limited while parsing. Every
way PyYAML can fail becomes one :class:`BudgetConfigError` naming the file and the line.
"""

from __future__ import annotations

import codecs
import os
import stat
from dataclasses import dataclass
from typing import Any

import yaml

from latency_budget._config.errors import BudgetConfigError
from latency_budget._config.limits import MAX_DEPTH, MAX_FILE_BYTES, MAX_INT_BITS, MAX_NODES

__all__ = ["FileSnapshot", "LocatedDict", "LocatedList", "decode_budget_text", "parse_yaml", "read_budget_file"]

# O_NONBLOCK: opening a FIFO for reading must not wait for a writer (it is refused just after).
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_INT_LIMIT = 1 << (MAX_INT_BITS - 1)
_INT_TEXT_LIMIT = MAX_INT_BITS + 16  # enough characters for any 64-bit integer YAML can write (0b..., 1_000_...)


class LocatedDict(dict[str, Any]):
    """A mapping that remembers its own line and the line of each key (1-based)."""

    line: int
    key_lines: dict[str, int]


class LocatedList(list[Any]):
    """A sequence that remembers its own line and the line of each item (1-based)."""

    line: int
    item_lines: list[int]


# -- reading the file ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileSnapshot:
    """A budget file's bytes, and what ``fstat`` said of the file around the read."""

    data: bytes
    version: tuple[int, int, int, int]
    """(device, inode, size, mtime in ns) after the read: a rewrite changes at least one of them."""
    mtime_ns: int
    changed_while_read: bool
    """True when size or mtime moved during the read: the file is being written."""


def read_budget_file(path: str | os.PathLike[str], source: str) -> FileSnapshot:
    """Read a budget file: a regular file of at most ``MAX_FILE_BYTES``, without ever blocking.

    Raises :class:`BudgetConfigError` (naming ``source``) for a missing or unreadable file,
    one that is not a regular file (a FIFO, a device such as ``/dev/zero``, a directory),
    and one over the size cap.
    """
    name = os.fspath(path)
    try:
        _require_regular(os.stat(name), source)
        fd = os.open(name, _OPEN_FLAGS)
    except OSError as exc:
        raise _unreadable(source, exc) from None
    try:
        before = os.fstat(fd)
        _require_regular(before, source)  # replaced between the stat and the open
        if before.st_size > MAX_FILE_BYTES:
            raise _too_large(source, before.st_size)
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_FILE_BYTES:
            raise _too_large(source, size)
        after = os.fstat(fd)
    except OSError as exc:
        raise _unreadable(source, exc) from None
    finally:
        os.close(fd)
    moved = (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or size != after.st_size
    return FileSnapshot(
        data=b"".join(chunks),
        version=(after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns),
        mtime_ns=after.st_mtime_ns,
        changed_while_read=moved,
    )


def decode_budget_text(data: bytes, source: str) -> str:
    """The file's text (UTF-8, with or without a byte-order mark); other encodings are one clear error."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise BudgetConfigError(
            source, 1, "", "the file is UTF-16 or UTF-32 text (it starts with a byte-order mark); save it as UTF-8"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise BudgetConfigError(source, line, "", f"not UTF-8 text: {exc.reason} (byte {exc.start})") from None


def _require_regular(status: os.stat_result, source: str) -> None:
    mode = status.st_mode
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        kind = "a directory"
    elif stat.S_ISFIFO(mode):
        kind = "a FIFO (named pipe)"
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        kind = "a device"
    elif stat.S_ISSOCK(mode):
        kind = "a socket"
    else:
        kind = "not a regular file"
    raise BudgetConfigError(
        source, None, "", f"cannot read budget file: it is {kind}; a budget file must be a regular file"
    )


def _too_large(source: str, size: int) -> BudgetConfigError:
    return BudgetConfigError(
        source, None, "", f"the file is larger than {MAX_FILE_BYTES // 1024} KiB ({size:,} bytes); is it a budget file?"
    )


def _unreadable(source: str, exc: OSError) -> BudgetConfigError:
    return BudgetConfigError(source, None, "", f"cannot read budget file: {exc.strerror or exc}")


# -- parsing ------------------------------------------------------------------------------


class _ValueProblem(ValueError):
    """A scalar the loader refuses; the message is shown as it is."""


class _Loader(yaml.SafeLoader):
    """The safe loader, composing no deeper than ``MAX_DEPTH`` and with 64-bit integers only."""

    def __init__(self, text: str, source: str) -> None:
        super().__init__(text)
        self._source = source
        self._depth = 0
        self._composed = 0

    def _too_deep(self, line: int) -> BudgetConfigError:
        return BudgetConfigError(self._source, line, "", f"invalid YAML: nested more than {MAX_DEPTH} levels deep")

    def fetch_flow_collection_start(self, token_class: type[yaml.Token]) -> None:
        # Each open '[' or '{' costs the scanner work for every one still open: stop early.
        if self.flow_level >= MAX_DEPTH:
            raise self._too_deep(self.line + 1)
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        # The composer recurses once per level: stop long before Python's recursion limit,
        # and stop building a tree of more values than the document may have.
        self._depth += 1
        self._composed += 1
        try:
            if self._depth > MAX_DEPTH:
                raise self._too_deep(self.peek_event().start_mark.line + 1)  # type: ignore[no-untyped-call]
            if self._composed > MAX_NODES:
                line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
                raise BudgetConfigError(self._source, line, "", f"the document has more than {MAX_NODES:,} values")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        # int() refuses over 4,300 decimal digits with a ValueError, but not hexadecimal or
        # sexagesimal text, which can be made as large as the file: check the length first.
        if len(node.value) > _INT_TEXT_LIMIT:
            raise _ValueProblem(f"integer too large (more than {MAX_INT_BITS} bits)")
        value: int = super().construct_yaml_int(node)
        if not -_INT_LIMIT <= value < _INT_LIMIT:
            raise _ValueProblem(f"integer too large (more than {MAX_INT_BITS} bits)")
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)

_PLAIN_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


class _Converter:
    """Node tree -> Located values, counting every value (aliases where they are used)."""

    def __init__(self, loader: _Loader, source: str) -> None:
        self.loader = loader
        self.source = source
        self.nodes = 0
        self.open: set[int] = set()  # ids of the collections being converted: an alias to one is a cycle

    def fail(self, node: yaml.Node, path: str, message: str) -> BudgetConfigError:
        return BudgetConfigError(self.source, node.start_mark.line + 1, path, message)

    def scalar(self, node: yaml.Node, path: str) -> Any:
        try:
            return self.loader.construct_object(node)
        except (BudgetConfigError, yaml.MarkedYAMLError):
            raise
        except _ValueProblem as exc:
            raise self.fail(node, path, str(exc)) from None
        except Exception as exc:  # PyYAML's constructors raise what int(), datetime() or a dict lookup raise
            tag = str(node.tag).rsplit(":", 1)[-1]
            text = str(node.value)
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise self.fail(node, path, f"invalid {tag} value {shown!r} ({type(exc).__name__})") from None

    def convert(self, node: yaml.Node, path: str, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(
                node, path, f"the document has more than {MAX_NODES:,} values (each alias counts where it is used)"
            )
        if not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            return self.scalar(node, path)
        if node.tag not in _PLAIN_COLLECTION_TAGS:
            raise self.fail(node, path, f"invalid YAML: unsupported tag {node.tag!r}")
        if depth > MAX_DEPTH:
            raise self.fail(node, path, f"nested more than {MAX_DEPTH} levels deep (through aliases)")
        if id(node) in self.open:
            raise self.fail(node, path, "recursive alias: this value contains itself")
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self.mapping(node, path, depth)
            return self.sequence(node, path, depth)
        finally:
            self.open.discard(id(node))

    def mapping(self, node: yaml.MappingNode, path: str, depth: int) -> LocatedDict:
        result = LocatedDict()
        result.line = node.start_mark.line + 1
        result.key_lines = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise BudgetConfigError(self.source, key_line, path, "mapping keys must be plain strings")
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise BudgetConfigError(self.source, key_line, path, "YAML merge keys ('<<') are not supported")
            key = self.scalar(key_node, path)
            if not isinstance(key, str):
                key = str(key)
            child = f"{path}.{key}" if path else key
            if key in result:
                raise BudgetConfigError(
                    self.source, key_line, child, f"duplicate key (first defined on line {result.key_lines[key]})"
                )
            result.key_lines[key] = key_line
            result[key] = self.convert(value_node, child, depth + 1)
        return result

    def sequence(self, node: yaml.SequenceNode, path: str, depth: int) -> LocatedList:
        items = LocatedList()
        items.line = node.start_mark.line + 1
        items.item_lines = []
        for index, item in enumerate(node.value):
            items.item_lines.append(item.start_mark.line + 1)
            items.append(self.convert(item, f"{path}[{index}]", depth + 1))
        return items


def parse_yaml(text: str, source: str) -> Any:
    """Parse one YAML document into Located values; every problem becomes one BudgetConfigError."""
    if len(text) > MAX_FILE_BYTES:
        raise BudgetConfigError(source, None, "", f"the text is longer than {MAX_FILE_BYTES // 1024} Ki characters")
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise BudgetConfigError(
            source, line, "", "a NUL byte: is the file UTF-16 without a byte-order mark? Budget files are UTF-8 text"
        )
    try:
        loader = _Loader(text, source)  # the reader checks every character here
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        character = exc.character if isinstance(exc.character, int) else 0
        raise BudgetConfigError(source, line, "", f"invalid YAML: unacceptable character U+{character:04X}") from None
    try:
        try:
            node = loader.get_single_node()
        except BudgetConfigError:
            raise
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = mark.line + 1 if mark is not None else None
            problem = exc.problem or str(exc)
            raise BudgetConfigError(source, where, "", f"invalid YAML: {problem}") from None
        except yaml.YAMLError as exc:
            raise BudgetConfigError(source, None, "", f"invalid YAML: {exc}") from None
        if node is None:
            return None
        try:
            return _Converter(loader, source).convert(node, "", 1)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            where = mark.line + 1 if mark is not None else None
            raise BudgetConfigError(source, where, "", f"invalid YAML: {exc.problem}") from None
    finally:
        loader.dispose()
