"""``latency-budget suggest TRACES``: a budget file from the percentiles recorded traces show."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import yaml

from latency_budget._config import BudgetConfigError, load_budgets
from latency_budget._core.report import format_ms
from latency_budget._core.wording import plural
from latency_budget._demo import example_budgets_text
from latency_budget._encode import yaml_comment, yaml_scalar
from latency_budget.cli._stats import ProfileSummary, StageSummary, percentile

from ._common import EXIT_INTERNAL, CliError, example_epilog, raw_help
from ._output import emit_or_write
from ._recorded import (
    DEMO_LABEL,
    Recorded,
    add_budgets_argument,
    add_percentile_argument,
    add_trace_arguments,
    load_recorded,
)

__all__ = ["draft", "register"]

_DESCRIPTION = """\
Write a budget file from what recorded traces show.

Each budget is the observed percentile (--percentile, default p95) times a headroom
factor (--headroom, default 1.2), rounded up to a whole millisecond, with a comment
above it that records the numbers it came from. Stages are recognised with the match
rules of --budgets FILE, whose requests rules, severities, call limits, objectives,
hint settings and profiles are carried over, or else with the built-in GenAI stages.
The result always passes `validate`."""

# Stage keys that describe how to recognise a stage, or policy rather than measurement: copied as they are.
_MAX_HEADROOM = 100.0
_CARRIED = ("severity", "objective", "max_calls", "parallelizable", "builtin", "match", "first_token")
# Request-level objectives, at the top and in profiles: policy, copied as they are.
_OBJECTIVES = ("total_objective", "first_token_objective")


def register(commands: Any) -> None:
    """Add the ``suggest`` subcommand."""
    parser = commands.add_parser(
        "suggest",
        help="write a budget file from recorded traces",
        description=_DESCRIPTION,
        epilog=example_epilog(
            "latency-budget suggest traces.jsonl > budgets.yaml",
            "latency-budget suggest traces.jsonl -b budgets.yaml --percentile p99 --headroom 1.5 -o new.yaml",
        ),
        formatter_class=raw_help(),
    )
    add_trace_arguments(parser)
    add_budgets_argument(parser, required=False, restage=True)
    add_percentile_argument(parser, purpose="percentile to start from")
    parser.add_argument(
        "--headroom",
        type=_headroom,
        default=1.2,
        metavar="FACTOR",
        help="multiply the percentile by this (default: 1.2)",
    )
    parser.add_argument("--output", "-o", metavar="FILE", help="write the YAML to FILE instead of standard output")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Suggest budgets and write them; the text is checked with the budget loader first."""
    recorded = load_recorded(args, levers=False)
    text = draft(recorded, args.budgets, args.percentile, args.headroom)
    emit_or_write(text, args.output or None)
    return 0


def draft(recorded: Recorded, budgets: str | None, percentile: float, headroom: float) -> str:
    """The suggested budget file for ``recorded``, judged under the file ``budgets`` (or the demo's or the built-in
    stages), checked by the loader."""
    text = _Writer(recorded, _raw_budgets(budgets, recorded), percentile, headroom).document()
    try:
        load_budgets(text=text, source="<suggested>")
    except BudgetConfigError as exc:  # a bug in this module, not the user's: say so plainly
        raise CliError(
            f"internal error: the suggested budget file does not validate: {exc}", exit_code=EXIT_INTERNAL
        ) from None
    return text


def _headroom(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a factor such as 1.2, got {text!r}") from None
    if not 0 < value <= _MAX_HEADROOM:  # also nan and inf; 1e308 would make budgets no float can hold
        raise argparse.ArgumentTypeError(
            f"expected a positive factor of at most {_MAX_HEADROOM:g}, such as 1.2, got {text!r}"
        )
    return value


def _raw_budgets(path: str | None, recorded: Recorded) -> dict[str, Any]:
    """The budget file as plain YAML data, to carry its match rules over verbatim (already validated)."""
    if path is None and recorded.budgets_label == DEMO_LABEL:
        data = yaml.safe_load(example_budgets_text())  # a recording of the demo: judged by the demo's budgets
    elif path is None:
        return {}
    else:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _ceil_ms(value: float) -> int:
    return max(1, math.ceil(round(value, 6)))


def _dump(data: Any, indent: int) -> list[str]:
    text = yaml.safe_dump(data, default_flow_style=False, sort_keys=False, allow_unicode=True, width=100)
    return [" " * indent + line for line in text.rstrip("\n").split("\n")]


class _Writer:
    """Builds the YAML text line by line, so each budget can carry its own comment."""

    def __init__(self, recorded: Recorded, raw: dict[str, Any], q: float, headroom: float) -> None:
        self.recorded = recorded
        self.raw = raw
        self.q = q
        self.headroom = headroom
        self.profiles = {p.profile: p for p in recorded.summary.profiles}

    def budget(self, values: tuple[float, ...]) -> int:
        return _ceil_ms(_percentile(values, self.q) * self.headroom)

    def observed(self, what: str, values: tuple[float, ...], of: int) -> str:
        """``# <what> in 133 of 153 requests: p50 .., p95 .., p99 .., max .. -> p95 x 1.2``."""
        numbers = ", ".join(f"p{q:g} {format_ms(_percentile(values, q))}" for q in (50, 95, 99))
        return (
            f"# {what} in {len(values)} of {plural(of, 'request')}: {numbers}, max {format_ms(values[-1])}"
            f" -> p{self.q:g} x {self.headroom:g}"
        )

    def document(self) -> str:
        recorded = self.recorded
        summary = recorded.summary
        lines = [
            f"# Latency budgets suggested by `latency-budget suggest` from {plural(summary.requests, 'request')}",
            f"# ({yaml_comment(recorded.traces.source_label)}; stages from {yaml_comment(recorded.budgets_label)}).",
            f"# Each budget is the observed p{self.q:g} x {self.headroom:g} headroom, rounded up to a whole ms.",
            "# Review before use: a budget states what the product needs, not only what it does today.",
            "version: 1",
        ]
        if "requests" in self.raw:
            lines += _dump({"requests": self.raw["requests"]}, 0)
        default = self.profiles.get("default")
        if default is not None:
            lines += self.totals(default, 0, self.raw)
        elif "total_ms" in self.raw or "first_token_ms" in self.raw:
            lines.append("# no request used the default budgets: request-level budgets copied from the input")
            lines += [f"{key}: {self.raw[key]}" for key in ("total_ms", "first_token_ms") if key in self.raw]
        if "severity" in self.raw:
            lines.append(f"severity: {self.raw['severity']}")
        for key in ("objective", *_OBJECTIVES, "hints"):
            if key in self.raw:
                lines += _dump({key: self.raw[key]}, 0)
        lines.append("stages:")
        raw_stages = self.raw.get("stages") or {}
        for name in recorded.config.stage_names:
            stage = self.stage(default, name)
            lines += self.stage_lines(name, stage, raw_stages.get(name) or {})
        lines += self.profile_lines()
        return "\n".join(lines) + "\n"

    def totals(self, profile: ProfileSummary, indent: int, raw: dict[str, Any]) -> list[str]:
        pad = " " * indent
        total = profile.total
        lines = [pad + self.observed("end to end, observed", total.actual_ms, total.requests)]
        lines.append(f"{pad}total_ms: {self.budget(total.actual_ms)}")
        if total.first_token_ms:
            lines.append(pad + self.observed("time to first token, observed", total.first_token_ms, total.requests))
            lines.append(f"{pad}first_token_ms: {self.budget(total.first_token_ms)}")
        elif "first_token_ms" in raw:
            lines.append(f"{pad}# no time to first token recorded: copied from the input")
            lines.append(f"{pad}first_token_ms: {raw['first_token_ms']}")
        return lines

    @staticmethod
    def stage(profile: ProfileSummary | None, name: str) -> StageSummary | None:
        if profile is None:
            return None
        return next((s for s in profile.stages if s.stage == name), None)

    def measured(self, stage: StageSummary | None, raw: dict[str, Any], indent: int) -> list[str]:
        """``budget_ms`` and ``first_token_ms`` lines (with comments), from data or copied from ``raw``."""
        pad = " " * indent
        lines: list[str] = []
        if stage is not None and stage.count:
            lines.append(pad + self.observed("observed", stage.actual_ms, stage.requests))
            lines.append(f"{pad}budget_ms: {self.budget(stage.actual_ms)}")
        elif "budget_ms" in raw:
            lines.append(f"{pad}# no spans of this stage were recorded: budget copied from the input")
            lines.append(f"{pad}budget_ms: {raw['budget_ms']}")
        if stage is not None and stage.first_token_ms:
            lines.append(pad + self.observed("time to first token, observed", stage.first_token_ms, stage.requests))
            lines.append(f"{pad}first_token_ms: {self.budget(stage.first_token_ms)}")
        elif "first_token_ms" in raw:
            lines.append(f"{pad}first_token_ms: {raw['first_token_ms']}")
        return lines

    def stage_lines(self, name: str, stage: StageSummary | None, raw: dict[str, Any]) -> list[str]:
        body = self.measured(stage, raw, 4)
        for key in _CARRIED:
            if key in raw:
                body += _dump({key: raw[key]}, 4)
        if not any(not line.lstrip().startswith("#") for line in body):
            return [f"  # {name}: no spans recorded and no budget to copy; tracked without a budget", f"  {name}: {{}}"]
        return [f"  {name}:", *body]

    def profile_lines(self) -> list[str]:
        raw_profiles = self.raw.get("profiles") or []
        if not raw_profiles:
            return []
        lines = ["profiles:"]
        for raw in raw_profiles:
            name = raw["name"]
            summary = self.profiles.get(name)
            lines.append(f"  - name: {yaml_scalar(name)}")
            lines += _dump({"when": raw["when"]}, 4)
            if "severity" in raw:
                lines.append(f"    severity: {raw['severity']}")
            for key in (*_OBJECTIVES, "hints"):
                if key in raw:
                    lines += _dump({key: raw[key]}, 4)
            if summary is None:
                lines.append("    # no request matched this profile: copied from the input")
                lines += [f"    {key}: {raw[key]}" for key in ("total_ms", "first_token_ms") if key in raw]
                if raw.get("stages"):
                    lines += _dump({"stages": raw["stages"]}, 4)
                continue
            lines += self.totals(summary, 4, raw)
            raw_overrides = raw.get("stages") or {}
            stage_lines: list[str] = []
            for stage_name in self.recorded.config.stage_names:
                stage = self.stage(summary, stage_name)
                override = raw_overrides.get(stage_name) or {}
                body = self.measured(stage, override, 8)
                for key in ("severity", "objective", "max_calls", "parallelizable"):
                    if key in override:
                        body += _dump({key: override[key]}, 8)
                if any(not line.lstrip().startswith("#") for line in body):
                    stage_lines += [f"      {stage_name}:", *body]
            if stage_lines:
                lines += ["    stages:", *stage_lines]
        return lines


def _percentile(values: tuple[float, ...], q: float) -> float:
    return percentile(values, q, presorted=True)
