"""The documentation site's pages (docs/), run as written: each page's Python blocks top to bottom
as one session with ``BNNZOO_QUICK=1`` (every draw and iteration count divided by ten), its TOML
run files checked as ``bnnzoo run`` would before running anything, and the sweep file on the
studies page equal to ``examples/sweep_small.toml``. And where dated measurements may live:
``benchmarks/results/``, the performance page and the paper pages, nowhere else; and that every
example that draws figures has them kept for the site (``docs/papers/figures/``), dated and small."""

import re

import numpy as np
import pytest

from bnnzoo.cli import read_sweep_file
from bnnzoo.diagnostics import groups
from bnnzoo.models import BNN
from tests.support.markdown import ROOT, blocks, check_run_file, run_session

DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if blocks(p, "python"))


def _table(session):
    table = session["table"]
    assert list(table["engine"]) == ["chees", "rwmh", "svi"]
    assert np.isfinite(table["rmse"]).all()


def _pyro(session):
    assert session["obs"].shape == (8 * 30, 100)
    assert {"posterior", "sample_stats", "log_likelihood"} <= set(groups(session["idata"]))


def _studies(session, tmp_path):
    grid = session["grid_table"]
    assert list(grid["kind"]) == ["fixed_hmc"] * 4 + ["rwmh"] * 2 and grid["acceptance"].between(0, 1).all()
    assert len(list((tmp_path / "out" / "sweep_python").glob("*.nc"))) == 6


def _posteriors(session):
    card, alone, table = session["card"], session["alone"], session["table"]
    assert 0.0 <= card["agreement"] <= 1.0 and 0.0 <= card["tv"] <= 1.0 and card["lppd"] < 0
    assert 0.0 <= alone["agreement"] <= 1.0 and alone["lppd"] < 0
    assert 0.0 <= table.loc["chees", "agreement"] <= 1.0 and table.loc["chees", "members"] == 2


#: what a page's blocks promise in their comments, checked after they ran
PROMISES = {
    "get-started.md": lambda s, tmp: _table(s),
    "guide/pyro-models.md": lambda s, tmp: _pyro(s),
    "guide/studies.md": _studies,
    "guide/models.md": lambda s, tmp: s["model"].num_params == 151 and "rleu" in s["message"],
    "guide/devices.md": lambda s, tmp: str(s["r64"].data.x_train.dtype) == "torch.float64",
    "guide/posteriors.md": lambda s, tmp: _posteriors(s),
    "guide/diagnostics.md": lambda s, tmp: {"posterior", "log_likelihood"} <= set(groups(s["idata"])),
    "papers/paper003.md": lambda s, tmp: 0.0 <= s["curve"].optimal_acceptance <= 1.0,
    "papers/paper001.md": lambda s, tmp: s["r"].inclusion_prob["layers.0.weight"].shape[-1] == 1000,
    "papers/paper004.md": lambda s, tmp: (s["r"].pruning_mask["layers.0.weight"].shape == (1, 5, 1000)
                                          and s["kept"].numel() <= 1000),
}


def test_every_page_with_python_is_run():
    assert PAGES, "no docs page has a Python block"
    assert set(PROMISES) <= {p.relative_to(DOCS).as_posix() for p in PAGES}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_python_blocks_run_top_to_bottom_as_one_session(page, monkeypatch, tmp_path):
    monkeypatch.setenv("BNNZOO_QUICK", "1")
    monkeypatch.chdir(tmp_path)  # anything a block writes lands here
    session = run_session(page)
    promise = PROMISES.get(page.relative_to(DOCS).as_posix())
    if promise is not None:
        assert promise(session, tmp_path) is not False, f"{page}: a block's promise does not hold"


def test_toml_blocks_are_valid_run_files(tmp_path):
    files = [(page, line, source) for page in sorted(DOCS.rglob("*.md")) for line, source in blocks(page, "toml")
             if "[sweep]" not in source]
    assert files
    for page, line, source in files:
        check_run_file(page, source, line, tmp_path)


def test_the_sweep_file_is_the_example_grid_and_valid():
    page = DOCS / "guide" / "studies.md"
    (line, source), = [(line, source) for line, source in blocks(page, "toml") if "[sweep]" in source]
    example = ROOT / "examples" / "sweep_small.toml"
    assert source == example.read_text(), f"{page}:{line} differs from {example}"
    plan = read_sweep_file(example)  # every cell checked, as `bnnzoo sweep` does before running any
    assert len(plan["cells"]) == 12 and BNN(plan["spec"]).num_params > 0


DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
#: where a dated measurement belongs (besides benchmarks/results/, which this test does not read)
DATED = {"docs/performance.md", "CHANGELOG.md"} | {p.relative_to(ROOT).as_posix() for p in (DOCS / "papers").rglob("*.md")}
# (docs/papers/figures/*/: the tables of the runs that drew the kept figures)


def test_dated_measurements_live_in_the_results_the_performance_page_and_the_papers():
    files = [ROOT / "README.md", *DOCS.rglob("*.md"), *(ROOT / "bnnzoo").rglob("*.py"),
             *(ROOT / "examples").glob("*.py")]  # the examples' docstrings are pages of the site
    found = [f"{f.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
             for f in files if f.relative_to(ROOT).as_posix() not in DATED
             for text in [f.read_text()] for m in DATE.finditer(text)]
    assert not found, "dated measurements outside benchmarks/results/, docs/performance.md and docs/papers/:\n" + \
        "\n".join(found)


def _figures_tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_figures", DOCS / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the most the kept figures may weigh, all together (they are in git)
FIGURES_BUDGET = 3 * 2**20


def test_every_example_that_draws_figures_has_them_kept_dated_and_small():
    import json

    tool = _figures_tool()
    scripts = tool.figure_scripts()
    assert "paper003_relu_hmc" in scripts and "paper004_group_sparse" not in scripts  # draws / tables only
    folders = sorted(p for p in tool.FIGURES.iterdir() if p.is_dir())
    assert [f.name for f in folders] == sorted(scripts), "a kept folder per example that draws figures"
    total = 0
    for folder in folders:
        stamp = json.loads((folder / "figures.json").read_text())
        assert stamp["command"].startswith(f"python examples/{folder.name}.py") and DATE.fullmatch(stamp["date"])
        assert stamp["machine"]["processor"] and stamp["figures"], stamp
        kept = {p.name for p in folder.iterdir()} - {"figures.json"}
        assert kept == set(stamp["figures"]) | set(stamp.get("tables", [])), f"{folder}: {kept} vs its figures.json"
        for name in stamp["figures"]:
            png = (folder / name).read_bytes()
            assert png[:8] == b"\x89PNG\r\n\x1a\n"
            width = int.from_bytes(png[16:20], "big")
            assert 200 <= width <= tool.MAX_WIDTH, f"{folder / name}: {width} px wide"
            total += len(png)
    assert total <= FIGURES_BUDGET, f"the kept figures weigh {total / 2**20:.1f} MiB"
