"""README.md: a newcomer's five minutes. Its Python block runs as written with ``BNNZOO_QUICK=1``
(every draw and iteration count divided by ten), its TOML run file is checked as ``bnnzoo run``
would before running anything, its engine table lists the registry's engines, and it stays short."""

import re

from bnnzoo.inference import ENGINES

from tests.support.markdown import ROOT, blocks, check_run_file, run_session
from bnnzoo.diagnostics import groups

README = ROOT / "README.md"


def test_the_readme_is_read_in_five_minutes():
    lines = README.read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines; the guide belongs in docs/"


def test_the_readme_documents_its_quick_switch():
    first = blocks(README, "python")[0][1]
    assert 'S = 10 if os.environ.get("BNNZOO_QUICK") == "1" else 1' in first
    assert "BNNZOO_QUICK=1" in README.read_text()


def test_python_blocks_run_top_to_bottom_as_one_session(monkeypatch, tmp_path):
    monkeypatch.setenv("BNNZOO_QUICK", "1")
    monkeypatch.chdir(tmp_path)  # anything a block writes lands here
    session = run_session(README)
    assert session["S"] == 10
    assert {"posterior", "sample_stats", "log_likelihood"} <= set(groups(session["idata"]))


def test_toml_blocks_are_valid_run_files(tmp_path):
    files = blocks(README, "toml")
    assert files
    for line, source in files:
        check_run_file(README, source, line, tmp_path)


def test_the_engine_table_lists_every_engine():
    text = README.read_text()
    table = text[text.index("| name | what |"):].split("\n\n")[0]
    named = {name for row in table.splitlines()[2:] for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    assert named == set(ENGINES), f"README.md's engine table: missing {set(ENGINES) - named}, extra {named - set(ENGINES)}"
