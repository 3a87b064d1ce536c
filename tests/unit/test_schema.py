"""budgets.schema.json: shipped in the package and the repository, and in agreement with the loader.

The central test generates budget documents, most of them valid and many with one
mistake somewhere, and asserts that the JSON Schema (checked with ``jsonschema``) and
``load_budgets`` accept and reject exactly the same ones.

The generator works in the JSON data model, which is what an editor and the schema see.
A few loader checks cannot be written in JSON Schema; the generator never produces them
by construction, and ``test_checks_the_schema_cannot_mirror`` pins each one down (schema
accepts, loader rejects), so this list cannot go stale silently:

* a profile overriding a stage that the file does not define (when the file has
  ``stages:``; without it, the schema restricts overrides to the built-in stages);
* two profiles with the same ``name`` (uniqueness of one field across array items);
* ``max_calls: 3.0``: JSON has one number type, so ``3.0`` is the integer 3 to a schema,
  while the loader wants it written as an integer;
* what JSON cannot hold: duplicate YAML keys, YAML merge keys and tags, non-string keys,
  YAML-only scalars (timestamps, binary) and NaN.

Everything else, including unclosed ``[`` in globs, reserved stage names, ``match``
required only for custom stages, case-insensitive span kinds and the profile-name
pattern, the schema checks itself.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from random import Random
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, Phase, event, find, given, settings
from hypothesis import strategies as st

from latency_budget import BudgetConfigError, load_budgets
from latency_budget.cli import main

REPO = Path(__file__).resolve().parents[2]
PACKAGED = resources.files("latency_budget._config").joinpath("budgets.schema.json")
SCHEMA = json.loads(PACKAGED.read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
BUILTIN = ("retrieval", "model_call", "tool_calls", "validation")

# -- the generator ---------------------------------------------------------------------
#
# `_pick` takes the valid strategy most of the time and a near miss (or any JSON value)
# now and then, so a document of a dozen fields is valid about half the time, and an
# invalid one usually has exactly one mistake, which is where schema and loader could
# disagree.

# PyYAML does not round-trip the Unicode line breaks NEL, LS and PS inside scalars.
_CHARS = st.characters(exclude_characters="\x85\u2028\u2029", exclude_categories=("Cs",))
# Integral floats are left out: 3.0 and 3 are one JSON number (see the module docstring).
_FLOATS = st.one_of(
    st.floats(-1e6, 1e6).map(lambda x: x + 0.25 if x.is_integer() else x), st.sampled_from([math.inf, -math.inf])
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 2**53),
    _FLOATS,
    st.text(_CHARS, max_size=6),
    st.sampled_from(["", "1", "ms"]),
)
_ANY = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(_CHARS, max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _rarely(draw: st.DrawFn, n: int) -> bool:
    """True about once in ``n`` draws (hypothesis favours the ends of a range, so not 0 or n)."""
    return draw(st.integers(1, n)) == n // 2


@st.composite
def _pick(
    draw: st.DrawFn, valid: st.SearchStrategy[Any], near_miss: st.SearchStrategy[Any] = _ANY, *, wild: bool = True
) -> Any:
    """Usually ``valid``; one time in 25 a ``near_miss`` or (when ``wild``) any JSON value."""
    if _rarely(draw, 25):
        return draw(st.one_of(near_miss, _ANY) if wild else near_miss)
    return draw(valid)


_PROTECTED = _pick(st.booleans(), st.sampled_from(["yes", 1, None]))  # a stage's key, never a profile's
_POSITIVE = st.one_of(st.integers(1, 10**12), st.floats(min_value=1e-6, max_value=1e15))
_POSITIVE_MISS = st.sampled_from([0, -1, -0.5, 0.0, math.inf, -math.inf, "100", True, None, [100]])
_WHOLE = st.integers(1, 10**6)
_WHOLE_MISS = st.sampled_from([0, -2, 2.5, "3", True, None])
# Objectives: a percentage above 0 and below 100 with up to 6 decimals; near misses around every edge.
_OBJECTIVE = st.one_of(
    st.sampled_from(["99%", "99.9%", "0.5%", "0.000001%", "99.999999%", "1%", "50.0%", "0.10%"]),
    st.builds(
        lambda whole, decimals: f"{whole}{'.' + decimals if decimals else ''}%",
        st.integers(1, 99),
        st.from_regex(r"[0-9]{0,6}", fullmatch=True),
    ),
)
_OBJECTIVE_MISS = st.one_of(
    st.sampled_from(["100%", "0%", "0.0%", "00%", "05%", "99", "99.%", "99.1234567%", " 99%", "99 %", "99%\n"]),
    st.sampled_from(["-1%", "1e1%", "\u0669%", 99, 0.99, None, True, ["99%"]]),
)
_SEVERITY = st.sampled_from(["warn", "error"])
_SEVERITY_MISS = st.sampled_from(["Warn", "ERROR", "fatal", "", 1, True, None])
_STAGE_NAME = st.one_of(st.sampled_from(BUILTIN), st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True))
_STAGE_NAME_MISS = st.sampled_from(["total", "unattributed", "Model", "1st", "a-b", "", "a\n", "_x", "é"])
# Plain globs, and globs of characters that make closed, unclosed and odd bracket groups likely.
_GLOB = st.one_of(
    st.from_regex(r"[a-z.*? ]{1,6}", fullmatch=True),
    st.from_regex(r"[a-z*]{0,3}\[!?[a-z]{1,3}\][a-z*]{0,3}", fullmatch=True),
    st.text(alphabet="ab*?[]!-\n", min_size=1, max_size=8),
)
_KIND = st.sampled_from(["internal", "server", "client", "producer", "consumer", "SERVER", "Client", "cOnSuMeR"])
_KIND_MISS = st.sampled_from(["span", "server\n", " client", "", 3, None, ["server"]])
_ATTR_VALUE = st.one_of(st.text(_CHARS, max_size=5), st.integers(-5, 5), _FLOATS, st.booleans())
_ATTR_VALUES_MISS = st.sampled_from([None, [], [None], {"a": 1}, [[1]], [{"a": 1}]])
_KEY = st.text(_CHARS, max_size=8)
_STRING_LIST = st.one_of(
    st.text(_CHARS, min_size=1, max_size=6), st.lists(st.text(_CHARS, min_size=1, max_size=6), min_size=1, max_size=3)
)
_STRING_LIST_MISS = st.sampled_from(["", [], [""], [1], 5, None, {"a": "b"}])
_UNIT = st.sampled_from(["s", "ms", "us", "ns", "iso8601"])
_UNIT_MISS = st.sampled_from(["sec", "MS", "", 1, None])
_PROFILE_NAME = st.one_of(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,6}", fullmatch=True).filter(lambda name: name != "default"),
    st.sampled_from(["Default", "v1.2", "a-b_c"]),
)
_PROFILE_NAME_MISS = st.sampled_from(["default", "-x", ".x", "a b", "", "x\n", "é", 7])
_TYPO_KEYS = st.sampled_from(["budget", "budgte_ms", "matches", "Match", "stage", "x"])


@st.composite
def _mapping(draw: st.DrawFn, fields: dict[str, st.SearchStrategy[Any]], required: tuple[str, ...] = ()) -> Any:
    """A mapping with a random subset of ``fields`` (``required`` ones usually present), now and then a typo key."""
    result: dict[str, Any] = {}
    for key, strategy in fields.items():
        present = not _rarely(draw, 25) if key in required else draw(st.booleans())
        if present:
            result[key] = draw(strategy)
    if _rarely(draw, 30):
        result[draw(_TYPO_KEYS)] = draw(_ANY)
    return result


_ATTRIBUTES = st.dictionaries(
    _KEY,
    _pick(st.one_of(_ATTR_VALUE, st.lists(_ATTR_VALUE, min_size=1, max_size=3)), _ATTR_VALUES_MISS),
    min_size=1,
    max_size=3,
)
_RULE_FIELDS = {
    "name": _pick(_GLOB, st.just("")),
    "attributes": _pick(_ATTRIBUTES, st.just({})),
    "exists": _pick(_STRING_LIST, _STRING_LIST_MISS),
    "kind": _pick(_KIND, _KIND_MISS),
    "scope": _pick(_GLOB, st.just("")),
}
_RULE = _mapping(_RULE_FIELDS)  # drawing no field at all gives the empty rule, a near miss
_MATCH = _pick(st.one_of(_RULE, st.lists(_RULE, min_size=1, max_size=3)), st.sampled_from([[], None, "retrieve*"]))
_FIRST_TOKEN = _pick(
    _mapping(
        {
            "attributes": _pick(st.dictionaries(_KEY, _pick(_UNIT, _UNIT_MISS), min_size=1, max_size=2), st.just({})),
            "events": _pick(_STRING_LIST, _STRING_LIST_MISS),
        },
        required=("events",),
    ),
    st.sampled_from([{}, [], "gen_ai.first_token"]),
)
_NON_NEGATIVE = st.one_of(st.just(0), _POSITIVE)
_NON_NEGATIVE_MISS = st.sampled_from([-1, -0.5, math.inf, "5", True, None, [5]])
_HINTS = _pick(
    _mapping({"min_saving_ms": _pick(_NON_NEGATIVE, _NON_NEGATIVE_MISS)}), st.sampled_from([None, [], 5, "5ms"])
)
# The quality section: drops of 0 to 1, levels above 0 and at most 0.5, evaluations as globs or glob -> entry.
_DROP = st.one_of(st.sampled_from([0, 1, 0.05, 0.5]), st.floats(0, 1))
_DROP_MISS = st.sampled_from([-0.1, 1.5, 2, "0.05", True, None, math.inf])
_LEVEL = st.one_of(st.sampled_from([0.5, 0.05, 0.01]), st.floats(1e-9, 0.5))
_LEVEL_MISS = st.sampled_from([0, 0.0, 0.6, 1, -0.05, "5%", True, None])
_EVALUATION = _pick(
    _mapping(
        {
            "higher_is_better": _pick(st.booleans(), st.sampled_from(["yes", 1, None])),
            "max_drop": _pick(_DROP, _DROP_MISS),
        }
    ),
    st.sampled_from([None, [], True, "x"]),
)
_QUALITY = _pick(
    _mapping(
        {
            "evaluations": _pick(
                st.one_of(
                    _GLOB,
                    st.lists(_GLOB, min_size=1, max_size=3),
                    st.dictionaries(_GLOB, _EVALUATION, min_size=1, max_size=3),
                ),
                st.sampled_from([{}, [], None, ""]),
            ),
            "max_drop": _pick(_DROP, _DROP_MISS),
            "significance": _pick(_LEVEL, _LEVEL_MISS),
        }
    ),
    st.sampled_from([None, [], 0.05, "strict"]),
)
_BUDGET_FIELDS = {
    "budget_ms": _pick(_POSITIVE, _POSITIVE_MISS),
    "first_token_ms": _pick(_POSITIVE, _POSITIVE_MISS),
    "max_calls": _pick(_WHOLE, _WHOLE_MISS),
    "severity": _pick(_SEVERITY, _SEVERITY_MISS),
    "objective": _pick(_OBJECTIVE, _OBJECTIVE_MISS),
    "parallelizable": _pick(st.booleans(), st.sampled_from(["yes", 1, None])),
}


@st.composite
def _stage(draw: st.DrawFn, name: str) -> Any:
    fields = {**_BUDGET_FIELDS, "match": _MATCH, "first_token": _FIRST_TOKEN, "protected": _PROTECTED}
    # A custom stage needs `match`; leaving it out is one of the near misses.
    return draw(_pick(_mapping(fields, required=() if name in BUILTIN else ("match",)), st.sampled_from([None, [], 5])))


@st.composite
def _stages(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(_pick(_STAGE_NAME, _STAGE_NAME_MISS, wild=False), min_size=1, max_size=4, unique=True))
    return {name: draw(_stage(name)) for name in names}


@st.composite
def _profiles(draw: st.DrawFn, stage_names: list[str] | None) -> list[Any]:
    """Profiles with unique names, overriding only stages the file defines.

    Without top-level ``stages`` the schema knows the stages (the built-in ones), so any
    name may be overridden there; with them, unknown overrides are a loader-only check.
    """
    count = draw(st.integers(0, 3))
    names = draw(st.lists(_pick(_PROFILE_NAME, _PROFILE_NAME_MISS), min_size=count, max_size=count, unique_by=repr))
    known = list(BUILTIN) if stage_names is None else stage_names
    override_names = st.sampled_from(known) if known else st.nothing()
    if stage_names is None:
        override_names = st.one_of(override_names, _pick(_STAGE_NAME, _STAGE_NAME_MISS, wild=False))
    profiles = []
    for name in names:
        override = _pick(_mapping(_BUDGET_FIELDS), st.sampled_from([None, [], 1]))
        overrides = (
            st.dictionaries(override_names, override, max_size=2) if known or stage_names is None else st.just({})
        )
        fields = {
            "name": st.just(name),
            "when": _pick(_RULE, st.sampled_from([None, [], "x"])),
            "total_ms": _pick(_POSITIVE, _POSITIVE_MISS),
            "first_token_ms": _pick(_POSITIVE, _POSITIVE_MISS),
            "severity": _pick(_SEVERITY, _SEVERITY_MISS),
            "total_objective": _pick(_OBJECTIVE, _OBJECTIVE_MISS),
            "first_token_objective": _pick(_OBJECTIVE, _OBJECTIVE_MISS),
            "hints": _HINTS,
            "stages": _pick(overrides, st.sampled_from([None, [], "model_call"])),
        }
        profiles.append(draw(_pick(_mapping(fields, required=("name", "when")), st.sampled_from([None, "p", []]))))
    return profiles


@st.composite
def documents(draw: st.DrawFn) -> Any:
    """A budget document in the JSON data model: usually valid, often with one mistake."""
    doc: dict[str, Any] = {}
    if not _rarely(draw, 25):
        doc["version"] = draw(_pick(st.just(1), st.sampled_from([2, 0, "1", True, 1.5, None])))
    for key, strategy in (
        ("total_ms", _pick(_POSITIVE, _POSITIVE_MISS)),
        ("first_token_ms", _pick(_POSITIVE, _POSITIVE_MISS)),
        ("severity", _pick(_SEVERITY, _SEVERITY_MISS)),
        ("objective", _pick(_OBJECTIVE, _OBJECTIVE_MISS)),
        ("total_objective", _pick(_OBJECTIVE, _OBJECTIVE_MISS)),
        ("first_token_objective", _pick(_OBJECTIVE, _OBJECTIVE_MISS)),
        ("requests", _MATCH),
        ("hints", _HINTS),
        ("quality", _QUALITY),
    ):
        if draw(st.booleans()):
            doc[key] = draw(strategy)
    stage_names: list[str] | None = None
    if draw(st.integers(0, 3)) != 0:
        stages = draw(_pick(_stages(), st.sampled_from([{}, None, [], "model_call"])))
        doc["stages"] = stages
        stage_names = list(stages) if isinstance(stages, dict) else []
    if draw(st.booleans()):
        doc["profiles"] = draw(_pick(_profiles(stage_names), st.sampled_from([{}, None, "voice"])))
    if _rarely(draw, 30):
        doc[draw(_TYPO_KEYS)] = draw(_ANY)
    if _rarely(draw, 50):
        return draw(st.sampled_from([None, [], "version: 1", 1]))
    return doc


_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _as_yaml(doc: Any) -> tuple[str, Any]:
    """The document as budget-file text, and what a YAML reader (so the schema) sees in it."""
    text = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    return text, yaml.load(text, Loader=_Loader)


def _loader_accepts(text: str) -> tuple[bool, str]:
    try:
        load_budgets(text=text, source="budgets.yaml")
    except BudgetConfigError as exc:
        return False, str(exc)
    return True, ""


# -- the schema and the loader agree ---------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_schema_and_loader_accept_and_reject_the_same_documents(doc: Any) -> None:
    """For generated documents, jsonschema and load_budgets agree on valid versus invalid."""
    text, data = _as_yaml(doc)
    assert data == doc, "the YAML round trip changed the document: the generator left the JSON data model"
    schema_ok = VALIDATOR.is_valid(data)
    loader_ok, error = _loader_accepts(text)
    event("valid" if loader_ok else "invalid")
    if schema_ok != loader_ok:
        found = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(data)]
        pytest.fail(f"schema {'accepts' if schema_ok else 'rejects'} {found}; loader: {error or 'accepts'}")


def test_the_generator_reaches_both_verdicts() -> None:
    """The agreement test is not vacuous: it generates documents the loader accepts and ones it rejects."""
    settings_ = settings(
        database=None, max_examples=1000, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
    )
    # find() draws from its own Random, not the derandomized profile: seeded, so the search repeats.
    valid = find(
        documents(),
        lambda d: _loader_accepts(_as_yaml(d)[0])[0] and bool(d.get("profiles")),
        settings=settings_,
        random=Random(0),
    )
    invalid = find(documents(), lambda d: not _loader_accepts(_as_yaml(d)[0])[0], settings=settings_, random=Random(0))
    assert VALIDATOR.is_valid(valid)
    assert not VALIDATOR.is_valid(_as_yaml(invalid)[1])


@pytest.mark.parametrize(
    ("text", "schema_message"),
    [
        ("version: 1\nstages: {guard: {budget_ms: 5}}\n", "'match' is a required property"),
        ("version: 1\nstages: {total: {budget_ms: 5, match: {name: t}}}\n", "should not be valid"),
        ("version: 1\nstages: {retrieval: {match: {name: 'retrieve[*'}}}\n", "does not match"),
        ("version: 1\nstages: {retrieval: {match: {kind: span}}}\n", "is not valid under any of the given schemas"),
        ("version: 1\nstages: {retrieval: {budget_ms: 0}}\n", "less than or equal to the minimum of 0"),
        ("version: 1\nstages: {retrieval: {budgte_ms: 5}}\n", "Additional properties are not allowed"),
        ("version: 1\nprofiles: [{name: default, when: {name: x}}]\n", "should not be valid"),
        ("version: 1\nprofiles: [{name: p, when: {name: x}, stages: {guard: {}}}]\n", "is not one of"),
        ("version: 2\n", "1 was expected"),
        ("version: 1\nobjective: 100%\n", "does not match"),
        ("version: 1\nstages: {model_call: {objective: 0.99}}\n", "is not of type 'string'"),
    ],
)
def test_schema_rejects_what_the_loader_rejects(text: str, schema_message: str) -> None:
    """Typical mistakes fail both the loader and the schema, with a schema message an editor can show."""
    assert not _loader_accepts(text)[0]
    messages = [error.message for error in VALIDATOR.iter_errors(yaml.safe_load(text))]
    messages += [sub.message for error in VALIDATOR.iter_errors(yaml.safe_load(text)) for sub in error.context or ()]
    assert any(schema_message in message for message in messages), messages


@pytest.mark.parametrize(
    "text",
    [
        "version: 1\nstages: {model_call: {}}\nprofiles: [{name: p, when: {name: x}, stages: {retrieval: {}}}]\n",
        "version: 1\nprofiles: [{name: p, when: {name: x}}, {name: p, when: {name: y}}]\n",
        "version: 1\nstages: {model_call: {max_calls: 3.0}}\n",
        "version: 1\nversion: 1\n",
        "version: 1\nstages: {model_call: {<<: {budget_ms: 5}}}\n",
        "version: 1\nstages: {model_call: {budget_ms: .nan}}\n",
    ],
    ids=["unknown-override", "duplicate-profile", "integral-float", "duplicate-key", "merge-key", "nan"],
)
def test_checks_the_schema_cannot_mirror(text: str) -> None:
    """The loader-only checks listed in this module's docstring: the schema accepts what the loader rejects."""
    assert not _loader_accepts(text)[0]
    data = yaml.safe_load(text)
    assert VALIDATOR.is_valid(data)


# -- where the schema lives ------------------------------------------------------------


def test_schema_is_valid_draft_2020_12() -> None:
    """The shipped schema is itself a valid Draft 2020-12 schema."""
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_repository_copy_is_the_packaged_schema() -> None:
    """budgets.schema.json at the top of the repository is byte for byte the packaged one (the source): copy it over."""
    assert (REPO / "budgets.schema.json").read_bytes() == PACKAGED.read_bytes()


def test_repository_example_is_the_packaged_example() -> None:
    """budgets.example.yaml at the top of the repository is the packaged one (the source) under the schema modeline."""
    packaged = resources.files("latency_budget._demo").joinpath("budgets.example.yaml").read_text(encoding="utf-8")
    repository = (REPO / "budgets.example.yaml").read_text(encoding="utf-8")
    assert repository == "# yaml-language-server: $schema=./budgets.schema.json\n" + packaged


@pytest.mark.parametrize(
    "path",
    [
        REPO / "budgets.example.yaml",
        REPO / "src/latency_budget/_demo/budgets.example.yaml",
        REPO / "tests/cli/fixtures/budgets.yaml",
    ],
    ids=["example", "demo", "fixture"],
)
def test_shipped_budget_files_satisfy_the_schema(path: Path) -> None:
    """The example budget files validate against the schema (and load)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert [error.message for error in VALIDATOR.iter_errors(data)] == []
    load_budgets(path)


def test_example_file_points_editors_at_the_schema() -> None:
    """budgets.example.yaml starts with the yaml-language-server modeline naming the schema beside it."""
    first = (REPO / "budgets.example.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=./budgets.schema.json"


def test_schema_command_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    """`latency-budget schema` prints the packaged schema, exactly."""
    assert main(["schema"]) == 0
    assert capsys.readouterr().out == PACKAGED.read_text(encoding="utf-8")


def test_schema_command_writes_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`latency-budget schema -o FILE` writes the schema to FILE and says where."""
    target = tmp_path / "budgets.schema.json"
    assert main(["schema", "-o", str(target)]) == 0
    assert target.read_bytes() == PACKAGED.read_bytes()
    assert str(target) in capsys.readouterr().err


def test_schema_command_has_help_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    """`latency-budget schema --help` shows an example invocation, like every subcommand."""
    with pytest.raises(SystemExit) as exited:
        main(["schema", "--help"])
    assert exited.value.code == 0
    assert "  latency-budget schema" in capsys.readouterr().out.split("examples:\n", 1)[1]


def test_schema_command_writes_a_file_and_says_so_as_every_command_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`latency-budget schema -o FILE` writes the packaged schema there and says `Wrote FILE.`, as rules does."""
    out = tmp_path / "budgets.schema.json"
    assert main(["schema", "-o", str(out)]) == 0
    assert capsys.readouterr() == ("", f"Wrote {out}.\n")
    assert out.read_text(encoding="utf-8") == PACKAGED.read_text(encoding="utf-8")
