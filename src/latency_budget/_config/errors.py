"""The one error type that configuration problems raise, and how messages quote a bad value."""

from __future__ import annotations

from collections.abc import Sequence

from latency_budget._core.wording import plural
from latency_budget._encode import visible

__all__ = ["BudgetConfigError", "describe_value"]


class BudgetConfigError(ValueError):
    """A budget file (or text) that cannot be used.

    The message always starts with ``<file>:<line>: <key path>:`` so an editor or a
    CI log points straight at the offending key. A file with several problems gives one
    error holding them all, in file order: ``source``, ``line``, ``path`` and ``detail`` are
    the first one's, ``problems`` lists every one and ``lines`` has a line for each; the
    message stays one line (a log record), the first problem and where the others are.
    """

    def __init__(
        self, source: str, line: int | None, path: str, message: str, *, more: Sequence[BudgetConfigError] = ()
    ) -> None:
        self.source = source
        self.line = line
        self.path = path
        self.detail = message
        # Keys and paths are shown escaped: a key holding ESC or a newline cannot reach a terminal raw.
        where = f"{visible(source)}:{line}" if line is not None else visible(source)
        prefix = f"{where}: {visible(path)}: " if path else f"{where}: "
        first = BudgetConfigError(source, line, path, message) if more else self
        self.problems: tuple[BudgetConfigError, ...] = (first, *more)
        text = prefix + message
        if more:
            where = ", ".join(f"{p.line}" if p.line is not None else "-" for p in more)
            text += f" (and {plural(len(more), 'more problem')}, on lines {where})"
        super().__init__(text)

    @property
    def lines(self) -> tuple[str, ...]:
        """One line per problem, each naming its file, line and key."""
        return tuple(str(problem) for problem in self.problems)

    @classmethod
    def combined(cls, problems: Sequence[BudgetConfigError]) -> BudgetConfigError:
        """One error for several problems (at least one), ordered by line."""
        ordered = sorted(problems, key=lambda p: p.line if p.line is not None else 0)
        first = ordered[0]
        if len(ordered) == 1:
            return first
        return cls(first.source, first.line, first.path, first.detail, more=ordered[1:])


def describe_value(value: object, *, mapping: str = "a mapping", null: str = "nothing (null)") -> str:
    """A bad value as an error message quotes it: its kind for containers, else a repr cut at 60 characters.

    ``mapping`` and ``null`` name those in the input's own terms (JSON says ``an object``, ``null``).
    """
    if isinstance(value, dict):
        return mapping
    if isinstance(value, list):
        return "a list"
    if value is None:
        return null
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
