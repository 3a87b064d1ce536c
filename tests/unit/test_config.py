"""Budget files: what loads, what it loads to, and the exact errors for what does not."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind

from latency_budget import BudgetConfigError, load_budgets

REPO = Path(__file__).resolve().parents[2]


def error_of(text: str) -> str:
    """The message load_budgets raises for ``text`` (named budgets.yaml)."""
    with pytest.raises(BudgetConfigError) as caught:
        load_budgets(text=text, source="budgets.yaml")
    return str(caught.value)


def test_minimal_file_uses_builtin_genai_matchers() -> None:
    """`stages: {model_call: {budget_ms: 800}}` is complete: model_call matches gen_ai chat spans."""
    config = load_budgets(text="version: 1\nstages: {model_call: {budget_ms: 800}}\n")
    assert config.stage_names == ("model_call",)
    assert config.default.total_ms == 800.0
    chat = config.classifier.classify("chat gpt-4o", SpanKind.CLIENT, "x", {"gen_ai.operation.name": "chat"})
    other = config.classifier.classify("GET /", SpanKind.SERVER, "x", {"http.route": "/"})
    assert (chat, other) == (0, -1)


def test_no_stages_tracks_the_builtin_stages_without_budgets() -> None:
    """With no `stages:` key the four GenAI stages are tracked, and only total/first-token are judged."""
    config = load_budgets(text="version: 1\ntotal_ms: 3000\n")
    assert config.stage_names == ("retrieval", "model_call", "tool_calls", "validation")
    assert all(stage.budget_ms is None for stage in config.default.stages)
    assert config.default.total_ms == 3000.0


def test_issue_example_loads_with_profiles() -> None:
    """The issue's full example loads; the batch profile overrides model_call and its total."""
    config = load_budgets(
        text="""
version: 1
total_ms: 1100
first_token_ms: 900
stages:
  retrieval:
    budget_ms: 100
    match:
      - attributes: {gen_ai.operation.name: [retrieval, embeddings]}
      - name: "retrieve*"
  model_call:
    budget_ms: 800
    first_token_ms: 300
    max_calls: 3
    severity: error
    match:
      - attributes: {gen_ai.operation.name: [chat, text_completion, generate_content]}
  tool_calls:
    budget_ms: 200
    match:
      - attributes: {gen_ai.operation.name: execute_tool}
profiles:
  - name: batch_jobs
    when: {attributes: {http.route: "/batch"}}
    total_ms: 30000
    stages: {model_call: {budget_ms: 20000}}
"""
    )
    batch = config.budgets_for_root("POST", SpanKind.SERVER, "", {"http.route": "/batch"})
    assert batch.profile == "batch_jobs"
    assert batch.total_ms == 30000.0
    assert batch.stage("model_call").budget_ms == 20000.0
    assert batch.stage("model_call").max_calls == 3  # not overridden: inherited
    assert config.budgets_for_root("POST", SpanKind.SERVER, "", {"http.route": "/chat"}).profile == "default"
    assert config.classifier.classify("retrieve_docs", SpanKind.INTERNAL, "", {}) == 0


def test_profile_without_total_uses_sum_of_effective_budgets() -> None:
    """A profile with no total_ms gets the sum of its effective stage budgets."""
    config = load_budgets(
        text="""
version: 1
stages: {retrieval: {budget_ms: 100}, model_call: {budget_ms: 800}}
profiles:
  - {name: slow, when: {name: "POST /batch*"}, stages: {model_call: {budget_ms: 5000}}}
"""
    )
    assert config.profiles[0].budgets.total_ms == 5100.0


def test_attribute_matching_is_exact_including_type() -> None:
    """True does not match 1, bytes never match a string, unhashable values never match."""
    config = load_budgets(
        text="""
version: 1
stages:
  flagged: {budget_ms: 10, match: {attributes: {n: 1}}}
  named: {budget_ms: 10, match: {attributes: {s: "abc"}}}
"""
    )
    classify = config.classifier.classify
    assert classify("x", SpanKind.INTERNAL, "", {"n": 1}) == 0
    assert classify("x", SpanKind.INTERNAL, "", {"n": True}) == -1
    assert classify("x", SpanKind.INTERNAL, "", {"n": 1.0}) == -1
    assert classify("x", SpanKind.INTERNAL, "", {"s": "abc"}) == 1
    assert classify("x", SpanKind.INTERNAL, "", {"s": b"abc"}) == -1
    assert classify("x", SpanKind.INTERNAL, "", {"s": ["abc"]}) == -1


def test_rule_keys_kind_scope_exists_and_name_combine_with_and() -> None:
    """Inside a rule every key must hold; across rules any one suffices."""
    config = load_budgets(
        text="""
version: 1
stages:
  db:
    budget_ms: 50
    match:
      - {name: "SELECT *", kind: client, scope: "opentelemetry.instrumentation.*", exists: [db.system]}
"""
    )
    classify = config.classifier.classify
    scope = "opentelemetry.instrumentation.sqlalchemy"
    assert classify("SELECT users", SpanKind.CLIENT, scope, {"db.system": "pg"}) == 0
    assert classify("SELECT users", SpanKind.SERVER, scope, {"db.system": "pg"}) == -1
    assert classify("SELECT users", SpanKind.CLIENT, "myapp", {"db.system": "pg"}) == -1
    assert classify("SELECT users", SpanKind.CLIENT, scope, {}) == -1
    assert classify("INSERT users", SpanKind.CLIENT, scope, {"db.system": "pg"}) == -1


def test_first_stage_in_file_order_wins() -> None:
    """Stages are ordered: when two stages' rules match, the first one in the file wins."""
    config = load_budgets(
        text="""
version: 1
stages:
  special: {budget_ms: 10, match: {name: "chat*"}}
  model_call: {budget_ms: 800}
"""
    )
    assert config.classifier.classify("chat x", SpanKind.CLIENT, "", {"gen_ai.operation.name": "chat"}) == 0
    assert config.classifier.classify("other", SpanKind.CLIENT, "", {"gen_ai.operation.name": "chat"}) == 1


def test_example_file_in_repo_is_valid() -> None:
    """budgets.example.yaml at the top of the repo loads."""
    example = REPO / "budgets.example.yaml"
    if not example.exists():
        pytest.fail("budgets.example.yaml is missing from the repository")
    assert load_budgets(example).stages


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    """A file that cannot be read is an error naming the path."""
    missing = tmp_path / "nope.yaml"
    with pytest.raises(BudgetConfigError, match=r"nope\.yaml: cannot read budget file"):
        load_budgets(missing)


def test_path_errors_name_the_file_and_line(tmp_path: Path) -> None:
    """Errors from a file carry that file's path and the key's line."""
    path = tmp_path / "budgets.yaml"
    path.write_text("version: 1\nstages:\n  retrieval:\n    budget_ms: 100\n  model_call:\n    budget_ms: fast\n")
    with pytest.raises(BudgetConfigError) as caught:
        load_budgets(path)
    assert str(caught.value) == f"{path}:6: stages.model_call.budget_ms: expected a positive number, got 'fast'"
    assert caught.value.line == 6


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "version: 1\nstages:\n  retrieval:\n    budget_ms: 100\n\n\n  model_call:\n    budget_ms: fast\n",
            "budgets.yaml:8: stages.model_call.budget_ms: expected a positive number, got 'fast'",
        ),
        (
            "version: 1\nstages:\n  model_call: {budget_ms: 0}\n",
            "budgets.yaml:3: stages.model_call.budget_ms: expected a positive number, got 0",
        ),
        (
            "version: 1\nstages:\n  model_call: {budget_ms: -5}\n",
            "budgets.yaml:3: stages.model_call.budget_ms: expected a positive number, got -5",
        ),
        (
            "version: 1\nstages:\n  model_call: {budget_ms: .nan}\n",
            "budgets.yaml:3: stages.model_call.budget_ms: expected a positive, finite number, got nan",
        ),
        (
            "version: 1\nstages:\n  model_call: {budget_ms: 1" + "0" * 400 + "}\n",
            "budgets.yaml:3: stages.model_call.budget_ms: integer too large (more than 64 bits)",
        ),
        (
            "version: 1\nstages:\n  model_call: {budget_ms: 1" + "0" * 400 + ".0}\n",
            "budgets.yaml:3: stages.model_call.budget_ms: expected a positive, finite number, got inf",
        ),
        (
            "version: 1\nstages:\n  model_call:\n    budget_ms: 800\n    budjet: 3\n",
            "budgets.yaml:5: stages.model_call.budjet: unknown key; did you mean 'budget_ms'?",
        ),
        (
            "version: 1\nstagse:\n  model_call: {budget_ms: 1}\n",
            "budgets.yaml:2: stagse: unknown key; did you mean 'stages'?",
        ),
        (
            "version: 1\nstages:\n  retrieval: {budget_ms: 1}\n  retrieval: {budget_ms: 2}\n",
            "budgets.yaml:4: stages.retrieval: duplicate key (first defined on line 3)",
        ),
        (
            "version: 1\nstages:\n  total: {budget_ms: 1, match: {name: x}}\n",
            "budgets.yaml:3: stages.total: 'total' is a reserved name; choose another stage name",
        ),
        (
            "version: 1\nstages:\n  Model.Call: {budget_ms: 1, match: {name: x}}\n",
            "budgets.yaml:3: stages.Model.Call: stage names must match [a-z][a-z0-9_]* "
            "(lowercase, digits, underscores)",
        ),
        (
            "version: 1\nstages:\n  rerank: {budget_ms: 1}\n",
            "budgets.yaml:3: stages.rerank: no 'match' rules; only the built-in stages "
            "(retrieval, model_call, tool_calls, validation) may omit them",
        ),
        (
            "version: 1\nstages:\n  rerank:\n    budget_ms: 1\n    match: {name: 'rerank[ab'}\n",
            "budgets.yaml:5: stages.rerank.match.name: invalid glob: unclosed '[' at position 6 in glob 'rerank[ab'",
        ),
        (
            "version: 1\nstages:\n  model_call: {budget_ms: 800}\nprofiles:\n  - name: batch\n"
            "    when: {name: 'POST /batch'}\n    stages: {model_cal: {budget_ms: 9}}\n",
            "budgets.yaml:7: profiles[0].stages.model_cal: profile overrides unknown stage 'model_cal'; "
            "did you mean 'model_call'?",
        ),
        (
            "version: 1\nstages:\n  model_call: {budget_ms: 800, severity: fatal}\n",
            "budgets.yaml:3: stages.model_call.severity: expected 'warn' or 'error', got 'fatal'",
        ),
        (
            "version: 1\nstages:\n  model_call: {budget_ms: 800, max_calls: 2.5}\n",
            "budgets.yaml:3: stages.model_call.max_calls: expected a positive whole number, got 2.5",
        ),
        (
            "version: 1\nstages:\n  model_call:\n    budget_ms: 800\n    match: {kind: sideways}\n",
            "budgets.yaml:5: stages.model_call.match.kind: expected one of internal, server, client, producer, "
            "consumer, got 'sideways'",
        ),
        (
            "version: 2\nstages:\n  model_call: {budget_ms: 800}\n",
            "budgets.yaml:1: version: unsupported version 2; expected 1",
        ),
        (
            "stages:\n  model_call: {budget_ms: 800}\n",
            "budgets.yaml:1: version: missing (expected 'version: 1')",
        ),
        ("", "budgets.yaml: the budget file is empty (expected at least 'version: 1')"),
        ("version: 1\nstages: [model_call]\n", "budgets.yaml:2: stages: expected a mapping, got a list"),
        ("version: 1\nstages:\n  model_call: {budget_ms: 800\n", "budgets.yaml:4: invalid YAML:"),
        (
            "version: 1\nstages:\n  model_call:\n    budget_ms: 800\n    match: {}\n",
            "budgets.yaml:5: stages.model_call.match: an empty rule would match every span",
        ),
        (
            "version: 1\nhints: {min_saving_ms: -1}\n",
            "budgets.yaml:2: hints.min_saving_ms: expected a number of 0 or more, got -1",
        ),
        (
            "version: 1\nhints:\n  min_savings_ms: 5\n",
            "budgets.yaml:3: hints.min_savings_ms: unknown key; did you mean 'min_saving_ms'?",
        ),
        (
            "version: 1\nprofiles:\n  - name: batch\n    when: {name: x}\n    hints: {min_saving_ms: .inf}\n",
            "budgets.yaml:5: profiles[0].hints.min_saving_ms: expected a number of 0 or more, got inf",
        ),
        ("version: 1\nhints: 5\n", "budgets.yaml:2: hints: expected a mapping, got 5"),
        (
            "version: 1\nrequests: {kind: web}\n",
            "budgets.yaml:2: requests.kind: expected one of internal, server, client, producer, consumer, got 'web'",
        ),
        (
            "version: 1\nrequests:\n  - {kind: server}\n  - {nmae: 'consume *'}\n",
            "budgets.yaml:4: requests[1].nmae: unknown key; did you mean 'name'?",
        ),
        ("version: 1\nrequests: []\n", "budgets.yaml:2: requests: expected a rule or a non-empty list of rules"),
        ("version: 1\nrequests: {}\n", "budgets.yaml:2: requests: an empty rule would match every span"),
        (
            "version: 1\nstages:\n  model_call:\n    budget_ms: 8\n    first_token: {attributes: {ttft: hours}}\n",
            "budgets.yaml:5: stages.model_call.first_token.attributes.ttft: expected a unit (s, ms, us, ns, iso8601), "
            "got 'hours'",
        ),
    ],
)
def test_bad_config_messages(text: str, message: str) -> None:
    """Each kind of bad budget file gets a message naming file, line and key path."""
    assert error_of(text).startswith(message)


def test_python_tags_are_refused_by_the_safe_loader() -> None:
    """Only PyYAML's safe loader is used: python object tags are an error, not code execution."""
    assert "invalid YAML" in error_of("version: 1\nstages: !!python/object/apply:os.system ['true']\n")


def test_profile_names_must_be_unique() -> None:
    """Two profiles with one name are rejected."""
    message = error_of(
        "version: 1\nstages:\n  model_call: {budget_ms: 800}\nprofiles:\n"
        "  - {name: a, when: {name: x}}\n  - {name: a, when: {name: y}}\n"
    )
    assert message == "budgets.yaml:6: profiles[1].name: duplicate profile 'a' (first defined on line 5)"


def test_hints_threshold_defaults_to_5_ms_and_profiles_inherit_or_override_it() -> None:
    """min_saving_ms: 5 by default; a top-level value reaches profiles that do not set their own."""
    assert load_budgets(text="version: 1\n").default.min_saving_ms == 5.0
    config = load_budgets(
        text="version: 1\nhints: {min_saving_ms: 0}\nprofiles:\n"
        "  - {name: a, when: {name: a}}\n  - {name: b, when: {name: b}, hints: {min_saving_ms: 50}}\n"
    )
    figures = [config.budgets_by_profile(name).min_saving_ms for name in ("default", "a", "b")]
    assert figures == [0.0, 0.0, 50.0]


def test_requests_rules_decide_which_local_roots_are_requests() -> None:
    """No `requests`: every root is a request; with rules, a root is one when any rule matches it."""
    assert load_budgets(text="version: 1\n").is_request("anything", SpanKind.INTERNAL, "", {})
    config = load_budgets(text="version: 1\nrequests:\n  - {kind: server}\n  - {name: 'query *'}\n")
    assert config.is_request("GET /", SpanKind.SERVER, "", {})
    assert config.is_request("query docs", SpanKind.INTERNAL, "", {})
    assert not config.is_request("SentenceSplitter.__call__", SpanKind.INTERNAL, "", {})
    single = load_budgets(text="version: 1\nrequests: {attributes: {http.route: /v1/answer}}\n")
    assert single.is_request("POST", SpanKind.SERVER, "", {"http.route": "/v1/answer"})
    assert not single.is_request("POST", SpanKind.SERVER, "", {"http.route": "/healthz"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "version: 1\nrequests: {attributes: {a: .nan}}\n",
            "budgets.yaml:2: requests.attributes.a: NaN never matches (NaN equals no value, itself included)",
        ),
        (
            "version: 1\nprofiles:\n  - name: p\n    when: {attributes: {a: [1, .NaN]}}\n",
            "budgets.yaml:4: profiles[0].when.attributes.a: NaN never matches",
        ),
        (
            'version: 1\nrequests: {attributes: {"": x}}\n',
            "budgets.yaml:2: requests.attributes.: an empty attribute key never matches",
        ),
    ],
)
def test_rules_that_can_never_match_are_refused(text: str, message: str) -> None:
    """A NaN value or an empty key in `requests` or a profile's `when` would silently turn budgets off: refused."""
    assert error_of(text).startswith(message)


def test_keys_in_errors_are_shown_escaped() -> None:
    """A key holding ESC, BEL or a newline is shown escaped in the error: it cannot drive a terminal or forge lines."""
    message = error_of('version: 1\nstages:\n  "\\e]0;pwned\\a\\nlatency-budget: OK": {budget_ms: 1}\n')
    assert message.startswith("budgets.yaml:3: stages.\\x1b]0;pwned\\x07\\x0alatency-budget: OK: stage names must")
    assert message.isprintable()
