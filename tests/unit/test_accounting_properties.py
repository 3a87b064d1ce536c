"""Property tests: random trace trees through a real pipeline, checked against a slow oracle.

The oracle works on a grid of TICK nanoseconds (every timestamp is a multiple of it) and
computes a stage's wall-clock union as the number of grid cells covered by at least one
of its spans: a set of cells, not the sort-and-merge sweep the package uses.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from latency_budget import BudgetConfig, TraceReport, load_budgets
from latency_budget import _attributes as attr
from latency_budget._core.accounting import union_length
from latency_budget._replay import evaluate_spans, record_of

from .helpers import T0, Pipeline, pipeline

TICK = 10_000  # ns on the grid: 0.01 ms
HORIZON = 40  # ticks a root may last (0.4 ms): small, so budgets and durations often tie
STAGES = ("a", "b", "c", "d")  # a, b, c match by name; d by the attribute role=d
KINDS = (*STAGES, "x")  # x: a span of no stage
FIRST_TOKEN_EVENT = "gen_ai.first_token"


def ms(ticks: int) -> float:
    """A tick count as the millisecond float the package computes from nanoseconds."""
    return ticks * TICK / 1e6


# -- budgets -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StageSpec:
    budget: int | None  # ticks
    first_token: int | None  # ticks
    max_calls: int | None
    severity: str


@dataclass(frozen=True)
class Spec:
    """Random budgets: the default profile and a ``batch`` profile chosen by the root's ``tier``."""

    stages: dict[str, StageSpec]
    total: int | None
    first_token: int | None
    severity: str
    batch_budgets: dict[str, int]
    batch_total: int | None

    def yaml(self) -> str:
        stages: dict[str, object] = {}
        for name in STAGES:  # config order is STAGES order, whatever order the dict was drawn in
            spec = self.stages[name]
            body: dict[str, object] = {
                "match": {"attributes": {"role": "d"}} if name == "d" else {"name": f"{name}:*"},
                "severity": spec.severity,
            }
            if spec.budget is not None:
                body["budget_ms"] = ms(spec.budget)
            if spec.first_token is not None:
                body["first_token_ms"] = ms(spec.first_token)
            if spec.max_calls is not None:
                body["max_calls"] = spec.max_calls
            stages[name] = body
        doc: dict[str, object] = {"version": 1, "severity": self.severity, "stages": stages}
        if self.total is not None:
            doc["total_ms"] = ms(self.total)
        if self.first_token is not None:
            doc["first_token_ms"] = ms(self.first_token)
        profile: dict[str, object] = {"name": "batch", "when": {"attributes": {"tier": "batch"}}}
        if self.batch_total is not None:
            profile["total_ms"] = ms(self.batch_total)
        if self.batch_budgets:
            profile["stages"] = {name: {"budget_ms": ms(t)} for name, t in self.batch_budgets.items()}
        doc["profiles"] = [profile]
        return yaml.safe_dump(doc, sort_keys=False)

    def config(self) -> BudgetConfig:
        return load_budgets(text=self.yaml(), source="random.yaml")


maybe_ticks = st.none() | st.integers(1, HORIZON)
severities = st.sampled_from(["error", "warn"])
stage_specs = st.builds(
    StageSpec, budget=maybe_ticks, first_token=maybe_ticks, max_calls=st.none() | st.integers(1, 4), severity=severities
)
specs = st.builds(
    Spec,
    stages=st.fixed_dictionaries({name: stage_specs for name in STAGES}),
    total=maybe_ticks,
    first_token=maybe_ticks,
    severity=severities,
    batch_budgets=st.dictionaries(st.sampled_from(STAGES), st.integers(1, HORIZON)),
    batch_total=maybe_ticks,
)


# -- traces ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    parent: int | None  # index of the parent node; None for the local root
    kind: str
    start: int  # ticks from the trace's base instant
    end: int
    first_token: int | None  # ticks after start of a first-token event
    late: bool  # for kind d: the role attribute is set after start


@dataclass(frozen=True)
class Tree:
    base: int  # ticks from T0 where the root starts
    batch: bool  # the root carries tier=batch, selecting the batch profile
    nodes: tuple[Node, ...]


@st.composite
def trees(draw: st.DrawFn, max_spans: int = 14) -> Tree:
    """A random tree; every child starts and ends within its root (in any order, overlapping)."""
    root_end = draw(st.integers(0, HORIZON))

    def node(parent: int | None, start: int, end: int) -> Node:
        kind = draw(st.sampled_from(KINDS))
        first_token = draw(st.none() | st.integers(0, end - start))
        return Node(parent, kind, start, end, first_token, late=kind == "d" and draw(st.booleans()))

    nodes = [node(None, 0, root_end)]
    for i in range(1, draw(st.integers(1, max_spans))):
        start = draw(st.integers(0, root_end))
        nodes.append(node(draw(st.integers(0, i - 1)), start, draw(st.integers(start, root_end))))
    return Tree(base=draw(st.integers(0, 10 * HORIZON)), batch=draw(st.booleans()), nodes=tuple(nodes))


@dataclass
class Built:
    """A tree whose spans have all started (none ended) in a pipeline."""

    tree: Tree
    spans: list[trace.Span] = field(default_factory=list)

    def end(self, index: int) -> None:
        node = self.tree.nodes[index]
        span = self.spans[index]
        if node.late:
            span.set_attribute("role", "d")
        span.end(end_time=T0 + (self.tree.base + node.end) * TICK)

    def readable(self, index: int) -> ReadableSpan:
        span = self.spans[index]
        assert isinstance(span, ReadableSpan)
        return span


def start_tree(p: Pipeline, tree: Tree) -> Built:
    built = Built(tree)
    for i, node in enumerate(tree.nodes):
        attributes: dict[str, str] = {}
        if node.kind == "d" and not node.late:
            attributes["role"] = "d"
        if node.parent is None and tree.batch:
            attributes["tier"] = "batch"
        parent = built.spans[node.parent] if node.parent is not None else None
        context = trace.set_span_in_context(parent) if parent is not None else None
        span = p.tracer.start_span(
            f"{node.kind}:{i}", context=context, attributes=attributes, start_time=T0 + (tree.base + node.start) * TICK
        )
        if node.first_token is not None:
            span.add_event(FIRST_TOKEN_EVENT, timestamp=T0 + (tree.base + node.start + node.first_token) * TICK)
        built.spans.append(span)
    return built


# -- the oracle --------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    profile: str
    stage_figures: dict[str, dict[str, object]]  # seen stages only: actual/busy/count/first_token
    violations: list[tuple[str, str, str]]  # (stage, kind, severity) in report order
    over_budget_stages: tuple[str, ...]
    warn_stages: tuple[str, ...]
    violated: bool
    total_actual_ms: float
    first_token_ms: float | None
    own_verdicts: dict[int, str | None]  # non-root stage span index -> violated / warned / None


def covered_cells(intervals: Sequence[tuple[int, int]]) -> int:
    """How many grid cells at least one half-open interval covers."""
    cells: set[int] = set()
    for start, end in intervals:
        cells.update(range(start, end))
    return len(cells)


def outermost(tree: Tree, index: int) -> bool:
    """Whether no ancestor of node ``index``, however far up, is of its kind: then it is a call of its own."""
    kind = tree.nodes[index].kind
    parent = tree.nodes[index].parent
    while parent is not None:
        if tree.nodes[parent].kind == kind:
            return False
        parent = tree.nodes[parent].parent
    return True


def oracle(spec: Spec, tree: Tree) -> Expected:
    """What the processor must report, computed the slow way from the spec and the tree."""
    overrides = spec.batch_budgets if tree.batch else {}
    budgets = {name: overrides.get(name, s.budget) for name, s in spec.stages.items()}
    total = spec.batch_total if tree.batch else spec.total
    total_ms = ms(total) if total is not None else None
    if total_ms is None and any(b is not None for b in budgets.values()):
        total_ms = sum(ms(b) for b in budgets.values() if b is not None)

    stage_figures: dict[str, dict[str, object]] = {}
    violations: list[tuple[str, str, str]] = []
    first_instants: list[int] = []
    own: dict[int, str | None] = {}
    for name in STAGES:
        stage = spec.stages[name]
        members = [(i, n) for i, n in enumerate(tree.nodes) if n.kind == name]
        if not members:
            continue
        actual = ms(covered_cells([(n.start, n.end) for _, n in members]))
        calls = [n for i, n in members if outermost(tree, i)]
        busy = sum(n.end - n.start for n in calls) * TICK / 1e6
        tokens = [n.first_token for _, n in members if n.first_token is not None]
        first_token = ms(max(tokens)) if tokens else None
        first_instants += [n.start + n.first_token for _, n in members if n.first_token is not None]
        stage_figures[name] = {"actual_ms": actual, "busy_ms": busy, "count": len(calls)}
        if first_token is not None:
            stage_figures[name]["worst_first_token_ms"] = first_token
        budget = budgets[name]
        if budget is not None and actual > ms(budget):
            violations.append((name, "duration", stage.severity))
        if stage.first_token is not None and first_token is not None and first_token > ms(stage.first_token):
            violations.append((name, "first_token", stage.severity))
        if stage.max_calls is not None and len(calls) > stage.max_calls:
            violations.append((name, "calls", stage.severity))
        for i, n in members:
            if i > 0:
                over = budget is not None and ms(n.end - n.start) > ms(budget)
                own[i] = ("violated" if stage.severity == "error" else "warned") if over else None
    trace_first_token = ms(min(first_instants)) if first_instants else None
    if spec.first_token is not None and trace_first_token is not None and trace_first_token > ms(spec.first_token):
        violations.append(("total", "first_token", spec.severity))
    total_actual = ms(tree.nodes[0].end)
    if total_ms is not None and total_actual > total_ms:
        violations.append(("total", "total", spec.severity))
    return Expected(
        profile="batch" if tree.batch else "default",
        stage_figures=stage_figures,
        violations=violations,
        over_budget_stages=tuple(s for s in (*STAGES, "total") if (s, "error") in {(v[0], v[2]) for v in violations}),
        warn_stages=tuple(s for s in (*STAGES, "total") if (s, "warn") in {(v[0], v[2]) for v in violations}),
        violated=any(v[2] == "error" for v in violations),
        total_actual_ms=total_actual,
        first_token_ms=trace_first_token,
        own_verdicts=own,
    )


def check_trace(p: Pipeline, built: Built, expected: Expected) -> None:
    """The exported spans of one built tree say exactly what the oracle expects."""
    exported = {s.context.span_id: s for s in p.finished() if s.context is not None}
    root = exported[built.spans[0].get_span_context().span_id]
    attrs = dict(root.attributes or {})
    assert attrs[attr.PROFILE] == expected.profile
    assert attrs[attr.TOTAL_ACTUAL_MS] == expected.total_actual_ms
    assert attrs.get(attr.TOTAL_FIRST_TOKEN_MS) == expected.first_token_ms
    seen = {}
    for stage in STAGES:
        figures = {
            field: attrs[attr.stage_key(stage, field)]
            for field in ("actual_ms", "busy_ms", "count", "worst_first_token_ms")
            if attr.stage_key(stage, field) in attrs
        }
        if figures:
            seen[stage] = figures
    assert seen == expected.stage_figures
    assert attrs[attr.OVER_BUDGET_STAGES] == expected.over_budget_stages
    assert attrs.get(attr.WARN_STAGES, ()) == expected.warn_stages
    assert attrs[attr.VIOLATED] is expected.violated
    assert str(attrs[attr.VERDICT]).startswith("OVER BUDGET: " if expected.violated else "within budget")
    events = [e for e in root.events if e.name == attr.VIOLATION_EVENT]
    found = [(e.attributes[attr.STAGE], e.attributes[attr.KIND], e.attributes[attr.SEVERITY]) for e in events]
    assert found == expected.violations
    assert all(e.timestamp == root.end_time for e in events)  # times on a grid of whole microseconds

    for index, verdict in expected.own_verdicts.items():
        span = exported[built.spans[index].get_span_context().span_id]
        own = dict(span.attributes or {})
        assert own.get(attr.VIOLATED, False) is (verdict == "violated")
        assert own.get(attr.WARNED, False) is (verdict == "warned")
        node = built.tree.nodes[index]
        copied = verdict is not None or node.late
        assert p.passed_untouched(span) is not copied


def check_forwarded_once(p: Pipeline, built: Sequence[Built]) -> None:
    """Every created span was exported exactly once, and nothing else was."""
    created = Counter(s.get_span_context().span_id for b in built for s in b.spans)
    exported = Counter(s.context.span_id for s in p.finished() if s.context is not None)
    assert exported == created
    assert set(exported.values()) == {1}


# -- properties --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, database=None)
@given(intervals=st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50)), max_size=12))
def test_union_length_counts_each_covered_nanosecond_once(intervals: list[tuple[int, int]]) -> None:
    """union_length equals the number of distinct instants covered, ignoring empty and reversed intervals."""
    assert union_length(intervals) == covered_cells(intervals)


def run_tree(spec: Spec, tree: Tree, data: st.DataObject) -> tuple[Pipeline, Built]:
    """Start every span of ``tree`` under ``spec``'s budgets, end the children in a drawn order, then the root."""
    p = pipeline(spec.config())
    built = start_tree(p, tree)
    for index in data.draw(st.permutations(range(1, len(tree.nodes))), label="end order"):
        built.end(index)
    built.end(0)
    return p, built


@settings(max_examples=150, deadline=None, database=None)
@given(spec=specs, tree=trees(), data=st.data())
def test_root_attributes_match_oracle_for_any_end_order(spec: Spec, tree: Tree, data: st.DataObject) -> None:
    """Union, busy, count, first token and every verdict match the oracle whatever order the children end in."""
    p, built = run_tree(spec, tree, data)

    check_trace(p, built, oracle(spec, tree))
    check_forwarded_once(p, [built])
    assert len(p.reports) == 1
    # The report's over_budget_stages names stages only; the root's attribute adds "total".
    assert p.reports[0].over_budget_stages == tuple(s for s in oracle(spec, tree).over_budget_stages if s != "total")


@settings(max_examples=80, deadline=None, database=None)
@given(
    spec=specs,
    forest=st.lists(trees(max_spans=10), min_size=1, max_size=3),
    threads=st.integers(2, 4),
    data=st.data(),
)
def test_concurrent_ends_across_threads_match_oracle(
    spec: Spec, forest: list[Tree], threads: int, data: st.DataObject
) -> None:
    """Several traces whose spans end on several threads at once give exactly the oracle's results."""
    p = pipeline(spec.config())
    built = [start_tree(p, tree) for tree in forest]
    children = [(t, i) for t, tree in enumerate(forest) for i in range(1, len(tree.nodes))]
    order = data.draw(st.permutations(children), label="end order")
    owners = data.draw(st.lists(st.integers(0, threads - 1), min_size=len(order), max_size=len(order)), label="thread")
    root_owners = data.draw(st.lists(st.integers(0, threads - 1), min_size=len(forest), max_size=len(forest)))
    barrier = threading.Barrier(threads, timeout=30)

    def worker(me: int) -> None:
        try:
            barrier.wait()
            for (t, i), owner in zip(order, owners, strict=True):
                if owner == me:
                    built[t].end(i)
            barrier.wait()  # every child has ended: now roots end, concurrently with each other
            for t, owner in enumerate(root_owners):
                if owner == me:
                    built[t].end(0)
        except BaseException:
            barrier.abort()  # release the other workers at once instead of at the timeout
            raise

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for future in [pool.submit(worker, n) for n in range(threads)]:
            future.result()

    for b in built:
        check_trace(p, b, oracle(spec, b.tree))
    check_forwarded_once(p, built)
    assert len(p.reports) == len(forest)
    assert p.processor.stats().active_traces == 0


@settings(max_examples=100, deadline=None, database=None)
@given(spec=specs, tree=trees(), data=st.data())
def test_replay_gives_the_live_report(spec: Spec, tree: Tree, data: st.DataObject) -> None:
    """evaluate_spans on the recorded spans returns the very TraceReport the live processor produced."""
    p, built = run_tree(spec, tree, data)

    records = [record_of(built.readable(i)) for i in data.draw(st.permutations(range(len(tree.nodes))))]
    replayed: list[TraceReport] = evaluate_spans(p.processor.config, records)
    assert replayed == p.reports
