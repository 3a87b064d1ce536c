"""The package as users get it: ``python -m build`` makes a wheel and an sdist, the sdist
builds the same wheel, and the wheel installs in a clean virtual environment (its
dependencies from the package index, nothing from this checkout) and runs the demo and
``check`` from its own console script.

The build runs without isolation, with the ``build`` and ``hatchling`` of the test extras,
so it needs no download; the clean environment installs the runtime dependencies with pip,
which needs the package index (or pip's cache), as a user's install does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO_REQUESTS = "20"


def _run(*args: str | Path, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run a command with an environment that does not point Python at this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME") and not k.startswith("OTEL_")}
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _build(source: Path, out: Path, *what: str) -> None:
    result = _run(sys.executable, "-m", "build", "--no-isolation", *what, "--outdir", out, source)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel and sdist that ``python -m build`` makes of this checkout."""
    out = tmp_path_factory.mktemp("dist")
    _build(REPO, out)
    return out


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def test_the_wheel_holds_the_package_its_data_its_entry_points_and_its_licence(dist: Path) -> None:
    """The wheel carries py.typed, the schema and example budgets, the four entry points and LICENSE."""
    with zipfile.ZipFile(_one(dist, "*.whl")) as wheel:
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


def test_the_sdist_builds_the_same_wheel(dist: Path, tmp_path: Path) -> None:
    """A wheel built from the unpacked sdist holds exactly the files of the wheel built from the checkout."""
    with tarfile.open(_one(dist, "*.tar.gz")) as sdist:
        sdist.extractall(tmp_path, filter="data")
    source = _one(tmp_path, "otel_latency_budget-*")
    again = tmp_path / "again"
    _build(source, again, "--wheel")
    with zipfile.ZipFile(_one(dist, "*.whl")) as first, zipfile.ZipFile(_one(again, "*.whl")) as second:
        assert sorted(first.namelist()) == sorted(second.namelist())
        for name in first.namelist():
            if not name.endswith("/RECORD"):
                assert first.read(name) == second.read(name), name


def test_the_wheel_installs_in_a_clean_venv_and_runs_the_demo_and_check(dist: Path, tmp_path: Path) -> None:
    """pip installs the wheel in a new venv; its ``latency-budget`` runs the demo and checks the saved traces."""
    venv = tmp_path / "venv"
    created = _run(sys.executable, "-m", "venv", venv)
    assert created.returncode == 0, created.stderr
    python, cli = venv / "bin" / "python", venv / "bin" / "latency-budget"
    installed = _run(python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", _one(dist, "*.whl"))
    assert installed.returncode == 0, installed.stderr[-3000:]
    where = _run(python, "-c", "import latency_budget; print(latency_budget.__file__)", cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), "the venv must import its own installed copy"
    traces = tmp_path / "traces.jsonl"
    demo = _run(cli, "demo", "-n", DEMO_REQUESTS, "--show", "0", "--save-traces", traces, cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert f"Summary of {DEMO_REQUESTS} requests" in demo.stdout
    spans = sum(1 for line in traces.read_text(encoding="utf-8").splitlines() if line.strip())
    assert spans > 0
    budgets = REPO / "budgets.example.yaml"
    check = _run(cli, "check", traces, "-b", budgets, "--format", "json", cwd=tmp_path)
    assert check.returncode in (0, 1), check.stderr  # 1: an error-level budget broke, as in the demo
    assert f'"requests": {DEMO_REQUESTS}' in check.stdout
