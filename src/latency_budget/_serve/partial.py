"""Partial traces: a trace an instance judged or forwarded on part of its spans, told by construction.

Behind the Collector's ``load_balancing`` exporter, every span of a trace goes to one
instance while the set of instances stays the same; when it changes (a scale event, a
restart), the spans that end after the change may go to another. Nothing then tells an
instance what the other holds, but each can see the marks of a part:

- ``missing_parent``: a rooted trace in which a span's parent is not among the trace's
  spans (with ``--roots trace``: with ``--roots local`` such a span is a local root). The
  judged root carries the mark; its verdict and report are on part of the trace.
- ``late_spans``: spans that arrived after their trace was decided here (judged, or
  forwarded without its root): each carries the mark, forwarded as it is otherwise; the
  root left before them, with a verdict that did not count them.
- ``no_root``: a trace forwarded unjudged because its root never came (``--max-wait``,
  made room for, or drained at shutdown): the spans whose parent is not among its spans
  (the tops of the part held here) carry the mark.

A gap the root's instance cannot see (only leaves went elsewhere) shows at the other
instance as ``no_root``: a trace split over instances is counted (``traces_partial``)
by at least one of them, once per instance that saw a part of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Literal, get_args

from opentelemetry.util.types import AttributeValue

from latency_budget import _attributes as attr
from latency_budget._serve.otlp import Received, annotated

__all__ = ["PARTIAL_REASONS", "PartialReason", "gaps", "mark", "mark_tops", "marks"]

PartialReason = Literal["missing_parent", "late_spans", "no_root"]
PARTIAL_REASONS: tuple[PartialReason, ...] = get_args(PartialReason)


_SPAN_ID = attrgetter("span_id")
_PARENT_ID = attrgetter("parent_id")


def gaps(spans: Sequence[Received]) -> set[int]:
    """The ids of the spans whose parent is not among ``spans`` (a parentless span has none).

    Run on every judged trace: the common case (nothing missing) is two sets built in C.
    """
    missing = set(map(_PARENT_ID, spans))
    missing.difference_update(map(_SPAN_ID, spans))
    missing.discard(None)
    if not missing:
        return set()
    return {item.span_id for item in spans if item.parent_id in missing}


def marks(reason: PartialReason) -> dict[str, AttributeValue]:
    """The attributes a marked span gains."""
    return {attr.PARTIAL: True, attr.PARTIAL_REASON: reason}


def mark(spans: Sequence[Received], reason: PartialReason) -> None:
    """Give each of ``spans`` the partial attributes (its ``encoded`` bytes rebuilt)."""
    added = marks(reason)
    for item in spans:
        item.encoded = annotated(item, added)


def mark_tops(spans: Sequence[Received], reason: PartialReason) -> None:
    """Mark the spans whose parent is not among ``spans``: the tops of a part that came without its root."""
    tops = gaps(spans)
    mark([item for item in spans if item.span_id in tops], reason)
