"""The HTML page's latency-versus-quality chart: one point per model and stage, the Pareto front marked."""

from __future__ import annotations

from html.parser import HTMLParser

from hypothesis import given
from hypothesis import strategies as st

from latency_budget._config.model import DEFAULT_QUALITY
from latency_budget._core.quality import QualityStats, Scores
from latency_budget.cli._levers import LeverAnalysis, ModelRow
from latency_budget.cli._quality_chart import Point, pareto_front, quality_section


def _front_by_sweep(points: list[Point], higher_is_better: bool) -> set[str]:
    """The front the other way: by latency, fastest first; a model is on it when it is the best of its latency
    and better than every faster model."""
    sign = 1 if higher_is_better else -1
    front: set[str] = set()
    best_before = -float("inf")
    for latency in sorted({p.latency_ms for p in points}):
        group = [p for p in points if p.latency_ms == latency]
        group_best = max(sign * p.quality for p in group)
        front.update(p.model for p in group if sign * p.quality == group_best and group_best > best_before)
        best_before = max(best_before, group_best)
    return front


@given(
    st.lists(st.tuples(st.integers(1, 20), st.integers(0, 10)), min_size=1, max_size=12),
    st.booleans(),
)
def test_the_front_is_the_set_no_model_beats_on_both(values: list[tuple[int, int]], higher: bool) -> None:
    """pareto_front agrees with a sweep over the models sorted by latency (an independent method)."""
    points = [Point(f"m{i}", float(ms), q / 10, 10) for i, (ms, q) in enumerate(values)]
    assert {p.model for p in pareto_front(points, higher_is_better=higher)} == _front_by_sweep(points, higher)


def _row(model: str, p50: float, quality: QualityStats | None) -> ModelRow:
    return ModelRow("model_call", model, (), (), (p50,), (), None, 0, None, quality)


def _scores(mean: float, n: int = 100) -> QualityStats:
    return QualityStats(n, {"correctness": Scores(n, mean, 0.01 * (n - 1))})


class _Circles(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.circles: dict[str, str] = {}
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "circle" and found.get("data-model") is not None:
            self.circles[found["data-model"] or ""] = found.get("data-front") or ""

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_each_model_is_a_point_and_the_front_is_marked() -> None:
    """fast (100 ms, 0.58), mid (300 ms, 0.91) and slow (500 ms, 0.90): fast and mid on the front, slow off it."""
    rows = (
        _row("fast", 100, _scores(0.58)),
        _row("mid", 300, _scores(0.91)),
        _row("slow", 500, _scores(0.90)),
        _row("blind", 200, None),
    )
    page = quality_section(LeverAnalysis(400, (), rows, (), 0, DEFAULT_QUALITY))
    parsed = _Circles()
    parsed.feed(page)
    assert parsed.circles == {"fast": "true", "mid": "true", "slow": "false"}
    assert 'class="front"' in page
    assert "No correctness for blind." in "".join(parsed.text)


def test_without_quality_data_the_section_says_so() -> None:
    """Null control: the same models with no quality statistics: no chart, one sentence."""
    rows = (_row("fast", 100, None), _row("slow", 500, None))
    page = quality_section(LeverAnalysis(400, (), rows, (), 0, DEFAULT_QUALITY))
    assert "<svg" not in page
    assert "No quality data" in page


def test_model_names_are_escaped_in_the_chart() -> None:
    """A model name with markup is text in the SVG, never markup."""
    rows = (_row("<script>x</script>", 100, _scores(0.9)), _row("b", 200, _scores(0.5)))
    page = quality_section(LeverAnalysis(2, (), rows, (), 0, DEFAULT_QUALITY))
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
