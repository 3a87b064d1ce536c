"""The first hour of a new user, from the built wheel in a fresh venv: demo, record, init, check, report, adjust.

The package is built as a release builds it (``python -m build``: a wheel and an sdist),
installed from the wheel into a new virtual environment with pip (its dependencies from
the package index), and every step runs the installed ``latency-budget`` and ``python``,
never this checkout's sources. About a minute and a half, most of it pip.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ..ci import skip_or_fail_in_ci

REPO = Path(__file__).resolve().parents[2]
APP = Path(__file__).resolve().parent / "app.py"
REQUESTS = 20  # app.REQUESTS


def _run(*command: str | Path, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with no OTEL_* variable and no PYTHONPATH: only what is installed counts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "PYTHONPATH"}
    done = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if check:
        assert done.returncode == 0, f"{command} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel and sdist of this checkout, built by ``python -m build``."""
    out = tmp_path_factory.mktemp("dist")
    built = _run(sys.executable, "-m", "build", "--outdir", out, REPO, cwd=REPO, check=False)
    if built.returncode != 0:
        skip_or_fail_in_ci(f"python -m build failed (no network for its build environment?): {built.stderr[-500:]}")
    return out


def test_the_wheel_holds_the_package_its_data_its_entry_points_and_its_licence(dist: Path) -> None:
    """The wheel carries py.typed, the schema and example budgets, the four entry points and LICENSE."""
    (wheel_path,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel_path) as wheel:
        names = set(wheel.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        declared = wheel.read(entry_points).decode()
    for data in ("py.typed", "_config/budgets.schema.json", "_demo/budgets.example.yaml", "cli/__init__.py"):
        assert f"latency_budget/{data}" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(n for n in names if "dist-info" in n)
    for group in ("[console_scripts]", "[pytest11]", "[opentelemetry_configurator]", "[opentelemetry_post_instrument]"):
        assert group in declared
    assert "latency-budget = latency_budget.cli:main" in declared
    assert not any(n.startswith("tests/") for n in names)


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed by pip; its bin directory."""
    root = tmp_path_factory.mktemp("venv")
    _run(sys.executable, "-m", "venv", root, cwd=root)
    bin_dir = root / ("Scripts" if os.name == "nt" else "bin")
    (wheel,) = dist.glob("*.whl")
    installed = _run(bin_dir / "python", "-m", "pip", "install", "--quiet", wheel, cwd=root, check=False)
    if installed.returncode != 0:
        skip_or_fail_in_ci(f"pip could not install the wheel (no package index?): {installed.stderr[-500:]}")
    return bin_dir


def test_the_sdist_holds_the_wheel_s_package(dist: Path, tmp_path: Path) -> None:
    """The sdist builds a wheel with the same files as the one built directly (schema, example, py.typed)."""
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    rebuilt = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp_path, sdist, cwd=tmp_path)
    assert rebuilt.returncode == 0
    (again,) = tmp_path.glob("*.whl")
    names = sorted(zipfile.ZipFile(wheel).namelist())
    assert names == sorted(zipfile.ZipFile(again).namelist())
    for needed in ("latency_budget/py.typed", "latency_budget/_config/budgets.schema.json"):
        assert needed in names
    assert "latency_budget/_demo/budgets.example.yaml" in names


def test_readme_install_lines_name_the_built_distribution(dist: Path) -> None:
    """The README's zero-code install line installs the wheel that ``python -m build`` makes (not on PyPI yet)."""
    (wheel,) = dist.glob("*.whl")
    pattern = f"{wheel.name.split('-')[0]}-*.whl"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"pip install dist/{pattern} opentelemetry-distro" in readme
    assert fnmatch.fnmatch(wheel.name, pattern)


def test_first_hour_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    """Demo, record an app with the public exporter, init, check, report --html, a match that adds, --restage."""
    cli = venv / "latency-budget"

    # 1. The demo, saved, ends with what to run next; its recording is judged by its own budgets.
    demo = _run(cli, "demo", "-n", "30", "--show", "0", "--save-traces", "demo.jsonl", cwd=tmp_path)
    assert "Next:" in demo.stdout
    assert "latency-budget report demo.jsonl --html report.html" in demo.stdout
    report = _run(cli, "report", "demo.jsonl", "--format", "json", cwd=tmp_path)
    assert json.loads(report.stdout)["budgets"].startswith("budgets.example.yaml, the demo's budgets")

    # 2. init writes a commented starter file; the app records its traces with configure(traces_file=...).
    _run(cli, "init", cwd=tmp_path)
    assert (tmp_path / "budgets.yaml").read_text(encoding="utf-8").startswith("# Latency budgets")
    _run(venv / "python", APP, "budgets.yaml", "traces.jsonl", cwd=tmp_path)
    lines = (tmp_path / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    assert {key for line in lines for key in json.loads(line)} <= {"resourceSpans", "resourceLogs"}

    # 3. check and report on the recording; the HTML page is written.
    checked = _run(cli, "check", "traces.jsonl", "-b", "budgets.yaml", "--format", "json", cwd=tmp_path)
    assert json.loads(checked.stdout)["requests"] == REQUESTS
    _run(cli, "report", "traces.jsonl", "-b", "budgets.yaml", "--html", "report.html", cwd=tmp_path)
    assert (tmp_path / "report.html").read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")

    # 4. A match that adds kb.lookup to retrieval keeps the built-in rules (the embeddings call stays).
    text = (tmp_path / "budgets.yaml").read_text(encoding="utf-8")
    retrieval = "  retrieval:\n    budget_ms: 500\n"
    text = text.replace(retrieval, retrieval + "    match: {name: kb.lookup}\n")
    (tmp_path / "budgets.yaml").write_text(text, encoding="utf-8")
    report_json = ("report", "traces.jsonl", "--format", "json", "--restage", "-b")
    added = _run(cli, *report_json, "budgets.yaml", cwd=tmp_path)
    # Request n's retrieval is the embeddings call (19 + n ms) and kb.lookup (30 + n ms), apart: 49 + 2n ms,
    # p50 68 ms over n = 0..19; kb.lookup alone (builtin: false) gives 39.5 ms.
    assert _row(added, "retrieval")["p50"] == pytest.approx(68.0)
    alone = text.replace("match: {name: kb.lookup}", "match: {name: kb.lookup}\n    builtin: false")
    (tmp_path / "alone.yaml").write_text(alone, encoding="utf-8")
    assert _row(_run(cli, *report_json, "alone.yaml", cwd=tmp_path), "retrieval")["p50"] == pytest.approx(39.5)

    # 5. A rule change that moves recorded spans: labels decide (with a warning) until --restage.
    lookups = "  lookups:\n    budget_ms: 100\n    match: {name: 'execute_tool *'}\n"
    changed = text.replace("stages:\n", "stages:\n" + lookups, 1)
    (tmp_path / "changed.yaml").write_text(changed, encoding="utf-8")
    labelled = _run(cli, "report", "traces.jsonl", "-b", "changed.yaml", "--format", "json", cwd=tmp_path)
    assert f"{REQUESTS} spans carry a recorded latency_budget.stage label" in labelled.stderr
    assert _row(labelled, "lookups").get("count", 0) == 0
    restaged = _run(cli, "report", "traces.jsonl", "-b", "changed.yaml", "--format", "json", "--restage", cwd=tmp_path)
    assert "latency_budget.stage label" not in restaged.stderr
    assert _row(restaged, "lookups")["count"] == REQUESTS

    # 6. init --from drafts budgets from the recording, which the recording then passes.
    _run(cli, "init", "--from", "traces.jsonl", "-o", "drafted.yaml", cwd=tmp_path)
    _run(cli, "check", "traces.jsonl", "-b", "drafted.yaml", cwd=tmp_path)


def _row(done: subprocess.CompletedProcess[str], stage: str) -> dict[str, float]:
    """The duration row of ``stage`` (count: requests it ran in, p50...) from ``report --format json``, or {}."""
    rows = json.loads(done.stdout)["rows"]
    found = [r for r in rows if r["stage"] == stage and r["metric"] == "duration" and r["profile"] == "default"]
    return found[0] if found else {}
