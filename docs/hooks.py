"""MkDocs hooks: the pages that are generated, never edited by hand.

* ``algorithms/*.md``: the sections of ``docs/algorithms.md`` (the one file that holds every
  update rule), grouped one page per sampler family, each followed by the API reference of
  its kernels and pure pieces. A section that no family names gets a page of its own.
  Links to ``algorithms.md#anchor`` anywhere in the site are sent to the page that holds
  the anchor.
* ``api/*.md``: the API reference, one page per package (mkdocstrings, static analysis).
* ``examples/*.md``: one page per script of ``examples/``: its docstring, how to run it, its
  figures and its source. The figures are the ones kept in ``docs/papers/figures/<script>/``
  (PNGs and a ``figures.json`` saying which command drew them, when and where; ``docs/figures.py``
  runs a script and keeps them), so a build from a fresh clone shows them without running
  anything.
* ``changelog.md``: ``CHANGELOG.md``.
* ``javascripts/``: MathJax 3 from the ``docs`` extra and its configuration, so that the
  mathematics is typeset without a network.
* Markers in hand-written pages, replaced at build time:
  ``<!-- bnnzoo:engines -->`` (the table of ``bnnzoo.inference.ENGINES``),
  ``<!-- bnnzoo:engine-options -->`` (every engine's options, default and meaning, read from
  the options dataclasses), ``<!-- bnnzoo:results NAME -->`` (the table of
  ``benchmarks/results/NAME.md`` with its date and machine) and
  ``<!-- bnnzoo:results-rest -->`` (every results table no marker has shown),
  ``<!-- bnnzoo:figures SCRIPT -->`` (the figures kept for ``examples/SCRIPT.py``, with their stamp),
  ``<!-- bnnzoo:cli-help -->`` (what ``bnnzoo --help`` and each command's ``--help`` print).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
ALGORITHMS = ROOT / "docs" / "algorithms.md"
RESULTS = ROOT / "benchmarks" / "results"
EXAMPLES = ROOT / "examples"
#: the examples' figures the site shows, one folder per script, each with its figures.json (docs/figures.py)
FIGURES = ROOT / "docs" / "papers" / "figures"

#: algorithm page -> (title, words that put a section of docs/algorithms.md on it, API modules)
FAMILIES = {
    "index": ("Overview and shared pieces", ["shared pieces", "references"],
              ["bnnzoo.inference.integrators", "bnnzoo.inference.kernels.base"]),
    "adaptation": ("Adaptation and target acceptance", ["adaptation components", "target acceptance by smoothness"],
                   ["bnnzoo.inference.adaptation", "bnnzoo.inference.tuning"]),
    "rwmh": ("Random-walk Metropolis", ["random-walk metropolis"], ["bnnzoo.inference.kernels.rwmh"]),
    "hmc": ("HMC and ChEES-HMC", ["fixed-step hmc", "chees-hmc"],
            ["bnnzoo.inference.kernels.hmc", "bnnzoo.inference.kernels.chees"]),
    "proximal-hmc": ("Proximal HMC and MAP baselines", ["proximal hmc", "map baselines"],
                     ["bnnzoo.inference.kernels.proximal_hmc", "bnnzoo.inference.proximal",
                      "bnnzoo.inference.map_fit"]),
    "nuts": ("NUTS: Pyro's and batched", ["nuts"], ["bnnzoo.inference.kernels.pyro_hmc", "bnnzoo.inference.kernels.nuts"]),
    "sgmcmc": ("SGLD and SGHMC", ["sgld and sghmc"],
               ["bnnzoo.inference.kernels.sgmcmc", "bnnzoo.inference.kernels.sgld", "bnnzoo.inference.kernels.sghmc",
                "bnnzoo.inference.sgmcmc", "bnnzoo.inference.pruning"]),
    "spike-and-slab": ("SGLD-SA and SGHMC-SA", ["sgld-sa"],
                       ["bnnzoo.inference.kernels.spike_slab_sa", "bnnzoo.inference.stochastic_approximation"]),
    "group-sparse": ("Group spike-and-slab SGHMC", ["group spike-and-slab"],
                     ["bnnzoo.inference.kernels.group_sparse", "bnnzoo.inference.group_em"]),
    "vi": ("Mean-field variational inference", ["variational inference"], ["bnnzoo.inference.vi"]),
    "defaults": ("Data-scaled defaults", ["data-scaled defaults"], []),
    "ensemble": ("Optimise, then sample", ["optimise, then sample"],
                 ["bnnzoo.inference.ensemble", "bnnzoo.inference.budget", "bnnzoo.diagnostics.members",
                  "bnnzoo.diagnostics.scorecard"]),
    "microcanonical": ("MCLMC and MAMS: microcanonical samplers", ["microcanonical samplers"],
                       ["bnnzoo.inference.kernels.transition", "bnnzoo.inference.kernels.mclmc",
                        "bnnzoo.inference.kernels.mams", "bnnzoo.inference.isokinetic"]),
}

#: API page -> (title, modules)
API = {
    "models": ("bnnzoo.models", ["bnnzoo.models.spec", "bnnzoo.models.bnn", "bnnzoo.models.priors",
                                 "bnnzoo.models.likelihoods", "bnnzoo.models.zoo", "bnnzoo.models.errors"]),
    "data": ("bnnzoo.data", ["bnnzoo.data.datasets", "bnnzoo.data.tabular", "bnnzoo.data.checks"]),
    "inference": ("bnnzoo.inference", ["bnnzoo.inference.engines.run", "bnnzoo.inference.engines.config",
                                       "bnnzoo.inference.engines.registry",
                                       "bnnzoo.inference.mcmc", "bnnzoo.inference.checkpoint",
                                       "bnnzoo.inference.options"]),
    "kernels": ("bnnzoo.inference.kernels", ["bnnzoo.inference.kernels"]),
    "potential": ("bnnzoo.inference.potential", ["bnnzoo.inference.potential"]),
    "runtime": ("The runtime layer: compilation, threads, CUDA graphs",
                ["bnnzoo.inference.runtime", "bnnzoo.inference.compiled_graphs", "bnnzoo.inference.compilation",
                 "bnnzoo.inference.threads", "bnnzoo.inference.cuda_graphs", "bnnzoo.inference.progress"]),
    "results": ("bnnzoo.results", ["bnnzoo.results"]),
    "diagnostics": ("bnnzoo.diagnostics", ["bnnzoo.diagnostics.arviz", "bnnzoo.diagnostics.summary",
                                           "bnnzoo.diagnostics.predictive", "bnnzoo.diagnostics.nested_rhat",
                                           "bnnzoo.diagnostics.plots", "bnnzoo.diagnostics.theory"]),
    "experiments": ("bnnzoo.experiments", ["bnnzoo.experiments.study", "bnnzoo.experiments.executors",
                                           "bnnzoo.experiments.compare", "bnnzoo.experiments.sweep",
                                           "bnnzoo.experiments.acceptance", "bnnzoo.experiments.report"]),
    "validation": ("bnnzoo.validation", ["bnnzoo.validation"]),
    "cli": ("bnnzoo.cli", ["bnnzoo.cli"]),
}


def slugify(text: str) -> str:
    """The anchor of a heading, as the site's ``toc`` makes it (and GitHub does)."""
    from pymdownx.slugs import slugify as make

    return make(case="lower")(text, "-")


# ---------------------------------------------------------------- docs/algorithms.md, split

def _sections() -> tuple[str, list[tuple[str, str]]]:
    """``(preamble, [(heading, text)])`` of the ``## `` sections of docs/algorithms.md."""
    text = ALGORITHMS.read_text()
    parts = re.split(r"^(## .*)$", text, flags=re.M)
    preamble = parts[0]
    return preamble, [(parts[i][3:].strip(), parts[i] + parts[i + 1]) for i in range(1, len(parts), 2)]


def _references(text: str, references: str) -> str:
    """The entries of the References section whose first author and year the page cites."""
    cited = []
    for entry in re.findall(r"^\* .*$", references, re.M):
        m = re.match(r"\* ([^,(]+?)[,( ].*?\((\d{4})\)", entry)
        if m and m.group(1).split()[-1] in text and m.group(2) in text:
            cited.append(entry)
    every = "Every reference of the algorithms: [overview](index.md#references).\n"
    return "\n## References\n\n" + "".join(f"{c}\n" for c in cited) + ("\n" if cited else "") + every


def _family(heading: str) -> str:
    title = re.sub(r"^\d+\.\s*", "", heading).lower()
    for page, (_, words, _) in FAMILIES.items():
        if any(w in title for w in words):
            return page
    return slugify(title)


def algorithm_pages() -> dict[str, tuple[str, str]]:
    """page -> (title, markdown), in the order of docs/algorithms.md."""
    preamble, sections = _sections()
    preamble = re.sub(r"^# .*\n", "", preamble)
    preamble = re.sub(r"^Contents:.*?(?:\n\n|\Z)", "", preamble, flags=re.S | re.M).replace("\n---\n", "\n")
    bodies: dict[str, list[str]] = {"index": []}
    titles = {}
    for heading, body in sections:
        page = _family(heading)
        bodies.setdefault(page, []).append(body)
        titles.setdefault(page, FAMILIES[page][0] if page in FAMILIES else re.sub(r"^\d+\.\s*", "", heading))
    titles["index"] = FAMILIES["index"][0]
    references = next((body for heading, body in sections if heading.lower() == "references"), "")
    pages = {}
    for page, parts in bodies.items():
        text = f"# {titles[page]}\n\n"
        if page == "index":
            text += preamble.strip() + "\n\nOne page per sampler family: " + ", ".join(
                f"[{titles[p]}]({p}.md)" for p in bodies if p != "index") + ".\n\n"
        text += _down("".join(parts))
        if page != "index":
            text += _references(text, references)
        modules = FAMILIES.get(page, ("", [], []))[2]
        if modules:
            text += "\n## API reference\n\n" + "".join(
                f"::: {m}\n    options:\n      heading_level: 3\n\n" for m in modules)
        pages[page] = (titles[page], text)
    return pages


def _down(markdown: str) -> str:
    """Relative links of docs/algorithms.md, made from one folder down (``algorithms/``)."""
    return re.sub(r"\]\((?!https?:|#|/|mailto:)([^)\s]+)\)", r"](../\1)", markdown)


def anchor_pages() -> dict[str, str]:
    """Every heading anchor of docs/algorithms.md -> the algorithm page that holds it."""
    where = {}
    for page, (_, text) in algorithm_pages().items():
        in_code = False
        for line in text.splitlines():
            if line.startswith("```"):
                in_code = not in_code
            elif not in_code and re.match(r"#{2,6} ", line):
                where.setdefault(slugify(line.lstrip("#").strip()), page)
    return where


_ANCHORS: dict[str, str] = {}


def _relink(markdown: str, src_uri: str) -> str:
    """``algorithms.md#anchor`` links -> the generated page holding the anchor; within an
    algorithm page, ``#anchor`` links to an anchor on another one likewise."""
    depth = src_uri.count("/")
    up = "../" * depth

    def target(anchor: str | None) -> str:
        page = _ANCHORS.get(anchor, "index") if anchor else "index"
        here = src_uri[len("algorithms/"):-3] if src_uri.startswith("algorithms/") else None
        if here is not None:
            return (f"#{anchor}" if page == here else f"{page}.md#{anchor}") if anchor else "index.md"
        return f"{up}algorithms/{page}.md" + (f"#{anchor}" if anchor else "")

    markdown = re.sub(r"\]\((?:\.\./)*(?:docs/)?algorithms\.md(?:#([\w-]+))?\)",
                      lambda m: f"]({target(m.group(1))})", markdown)
    if src_uri.startswith("algorithms/"):
        markdown = re.sub(r"\]\(#([\w-]+)\)", lambda m: f"]({target(m.group(1))})", markdown)
    return markdown


# ---------------------------------------------------------------- engines, from the registry

def engines_table() -> str:
    from bnnzoo.inference import ENGINES

    rows = ["| engine | kind | kernel | what |", "|---|---|---|---|"]
    for name, engine in ENGINES.items():
        kernel = f"`{engine.kernel.__name__}`" if engine.kernel is not None else "–"
        rows.append(f"| `{name}` | {engine.kind} | {kernel} | {_cell(engine.description)} |")
    return "\n".join(rows) + "\n"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(value) -> str:
    from dataclasses import MISSING

    return "(required)" if value is MISSING else f"`{value!r}`"


def engine_options() -> str:
    from bnnzoo.inference import ENGINES

    out = []
    for name, engine in ENGINES.items():
        source = engine.kernel or engine.options_cls
        out.append(f"### `{name}`\n\n{_cell(engine.description)}. Options from "
                   f"`{engine.options_cls.__module__}.{engine.options_cls.__qualname__}`"
                   f"{'' if engine.kernel is None else f' (kernel `{source.__module__}.{source.__name__}`)'}.\n")
        docs = engine.option_docs()
        out.append("| option | default | meaning |\n|---|---|---|")
        for option, default in engine.defaults().items():
            out.append(f"| `{option}` | {_cell(_value(default))} | {_cell(docs.get(option, ''))} |")
        out.append("")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- benchmark results

def results_table(name: str, shown: set[str]) -> str:
    """``benchmarks/results/NAME.md`` under a line that says when and where it was measured."""
    path = RESULTS / f"{name}.md"
    if not path.exists():
        raise FileNotFoundError(f"docs: <!-- bnnzoo:results {name} -->: no {path.relative_to(ROOT)}")
    shown.add(name)
    text = path.read_text().strip()
    stamp = _stamp(name)
    source = f"`benchmarks/results/{name}.md`" + (f", {stamp}" if stamp else "")
    return f"*{source}*\n\n{text}\n"


def _stamp(name: str) -> str:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return ""
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return ""
    machine = data.get("machine") if isinstance(data, dict) else None
    if not isinstance(machine, dict):
        return ""
    where = ", ".join(str(machine[k]) for k in ("processor", "device") if machine.get(k))
    cpus = f" ({machine['cpus']} CPUs)" if machine.get("cpus") else ""
    torch = f", torch {machine['torch']}" if machine.get("torch") else ""
    return f"measured {machine.get('date', '(undated)')} on {where}{cpus}{torch}"


def results_rest(shown: set[str]) -> str:
    out = []
    for path in sorted(RESULTS.glob("*.md")):
        if path.stem not in shown:
            out.append(f"### {path.stem}\n\n" + results_table(path.stem, set()))
    return "\n".join(out) or "Every table is shown above.\n"


# ---------------------------------------------------------------- examples

def _docstring(source: str) -> str:
    import ast

    text = ast.get_docstring(ast.parse(source)) or ""
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([^`]+)`", r"`\1`", text)  # Sphinx roles -> code
    text = text.replace("``", "`")
    return re.sub(r"::\n", ":\n", text).strip()


def stored_figures(script: str) -> tuple[dict, list[Path]]:
    """``(stamp, PNGs)`` kept for ``examples/<script>.py`` in ``docs/papers/figures/<script>/``
    (written by ``docs/figures.py``); ``({}, [])`` when none are kept."""
    folder = FIGURES / script
    stamp_file = folder / "figures.json"
    if not stamp_file.exists():
        return {}, []
    stamp = json.loads(stamp_file.read_text())
    pngs = [folder / name for name in stamp.get("figures", [])]
    missing = [p.name for p in pngs if not p.exists()]
    if missing:
        raise FileNotFoundError(f"docs: {stamp_file.relative_to(ROOT)} lists {missing}, not in {folder.relative_to(ROOT)}")
    return stamp, pngs


def figures_markdown(script: str, page_uri: str) -> str:
    """The figures kept for ``examples/<script>.py``, each under its name, then one line saying which
    command drew them, when, where and at which commit; linked from ``page_uri``."""
    stamp, pngs = stored_figures(script)
    if not pngs:
        source = (EXAMPLES / f"{script}.py").read_text()
        writes = "savefig" in source or ".png" in source and "plot_" in source  # as docs/figures.py decides
        return ("*No figures are kept for this script yet: `python docs/figures.py " + script + "` runs it and keeps them.*\n"
                if writes else "*This script writes tables, not figures.*\n")
    up = "../" * page_uri.count("/")
    out = []
    for png in pngs:
        out.append(f"![{script}: {png.stem}]({up}papers/figures/{script}/{png.name})\n")
        out.append(f"*`{png.name}`*\n")
    m = stamp.get("machine", {})
    where = m.get("processor", "")
    where += f" ({m['cpus']} CPUs)" if m.get("cpus") else ""
    where += f", torch {m['torch']}" if m.get("torch") else ""
    before, end = m.get("load_average_before"), m.get("load_average_end")
    where += f", load average {before[0]:g} at the start" if before else ""
    where += f" and {end[0]:g} at the end" if before and end else ""
    wall = f", {stamp['wall_s']} s wall" if stamp.get("wall_s") is not None else ""
    at = f" at commit `{stamp['commit']}`" if stamp.get("commit") else ""
    out.append(f"*Drawn by `{stamp['command']}` on {stamp.get('date', '(undated)')}{at}, on {where}{wall}. "
               f"Kept in `docs/papers/figures/{script}/`; `python docs/figures.py {script}` redraws them.*\n")
    for name in stamp.get("tables", []):
        table = re.sub(r"^#+ (.*)$", r"**\1**", (FIGURES / script / name).read_text().strip(), flags=re.M)  # no TOC entries
        out.append(f'??? note "The same run\'s `{name}`"\n')
        out.append("\n".join(f"    {line}" if line else "" for line in table.splitlines()) + "\n")
    return "\n".join(out)


def example_page(path: Path) -> str:
    source = path.read_text()
    lead, _, body = (_docstring(source) or path.stem).partition("\n\n")
    title = " ".join(lead.split()).rstrip(".")
    out = [f"# {path.stem}\n", f"**{title}.**\n", body, "",
           "## Run it\n", f"```bash\n.venv/bin/python examples/{path.name}            # small, the default\n"
           f".venv/bin/python examples/{path.name} --smoke    # seconds: what the test suite runs\n"
           f".venv/bin/python examples/{path.name} --full     # the paper's sizes\n```\n",
           "## Figures\n", figures_markdown(path.stem, f"examples/{path.stem}.md")]
    out += ["## Source\n", f'??? note "examples/{path.name}"\n', "    ```python"]
    out += [f"    {line}" if line else "" for line in source.splitlines()]
    out.append("    ```\n")
    return "\n".join(out)


# ---------------------------------------------------------------- hooks

def on_config(config):
    _SHOWN.clear()
    pages = algorithm_pages()
    _ANCHORS.clear()
    _ANCHORS.update(anchor_pages())
    nav = config["nav"]
    for entry in nav:
        if "Algorithms" in entry:
            entry["Algorithms"] = [{title: f"algorithms/{page}.md"} for page, (title, _) in pages.items()]
        elif "Examples" in entry:
            entry["Examples"] = [f"examples/{p.stem}.md" for p in sorted(EXAMPLES.glob("*.py"))]
        elif "API reference" in entry:
            entry["API reference"] = [{title: f"api/{page}.md"} for page, (title, _) in API.items()]
    return config


def on_files(files, config):
    def add(uri: str, content: str):
        files.append(File.generated(config, uri, content=content))

    for page, (_, text) in algorithm_pages().items():
        add(f"algorithms/{page}.md", text)
    for page, (title, modules) in API.items():
        add(f"api/{page}.md", f"# {title}\n\n" + "".join(f"::: {m}\n\n" for m in modules))
    for path in sorted(EXAMPLES.glob("*.py")):
        add(f"examples/{path.stem}.md", example_page(path))
    add("changelog.md", (ROOT / "CHANGELOG.md").read_text())
    add("javascripts/mathjax-config.js", MATHJAX_CONFIG)
    files.append(File.generated(config, "javascripts/mathjax/tex-svg.js", abs_src_path=str(mathjax_script())))
    return files


#: MathJax reads the ``\\( \\)`` and ``\\[ \\]`` that pymdownx.arithmatex (generic) leaves in the pages
MATHJAX_CONFIG = """window.MathJax = {
  tex: {inlineMath: [["\\\\(", "\\\\)"]], displayMath: [["\\\\[", "\\\\]"]], processEscapes: true, processEnvironments: true},
  options: {ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex"}
};
"""


def mathjax_script() -> Path:
    """MathJax 3's TeX-to-SVG component (one file, fonts included), from the ``docs`` extra's
    copy of MathJax, so the site typesets its mathematics offline."""
    from importlib.util import find_spec

    spec = find_spec("mathjax")
    script = Path(spec.origin).parent / "static" / "mathjax" / "es5" / "tex-svg.js" if spec and spec.origin else None
    if script is None or not script.exists():
        raise FileNotFoundError("docs: MathJax not found; install the docs extra (pip install -e \".[docs]\")")
    return script


_SHOWN: set[str] = set()


def on_page_markdown(markdown, page, config, files):
    src = page.file.src_uri
    markdown = _relink(markdown, src)
    if "<!-- bnnzoo:" not in markdown:
        return markdown
    markdown = markdown.replace("<!-- bnnzoo:engines -->", engines_table())
    markdown = markdown.replace("<!-- bnnzoo:engine-options -->", engine_options())
    if "<!-- bnnzoo:cli-help -->" in markdown:
        markdown = markdown.replace("<!-- bnnzoo:cli-help -->", cli_help())
    markdown = re.sub(r"<!-- bnnzoo:results (\w+) -->", lambda m: results_table(m.group(1), _SHOWN), markdown)
    markdown = re.sub(r"<!-- bnnzoo:figures (\w+) -->", lambda m: _figures_marker(m.group(1), src), markdown)
    if "<!-- bnnzoo:results-rest -->" in markdown:
        markdown = markdown.replace("<!-- bnnzoo:results-rest -->", results_rest(_SHOWN))
    return markdown


def _figures_marker(script: str, src: str) -> str:
    if not (EXAMPLES / f"{script}.py").exists():
        raise FileNotFoundError(f"docs: {src}: <!-- bnnzoo:figures {script} -->: no examples/{script}.py")
    return figures_markdown(script, src)


_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc|const|ref|term):<code>~?([^<]*)</code>")


def on_page_content(html, page, config, files):
    """Sphinx roles left in docstrings (``:class:`~a.B```) shown as plain code (``B``)."""
    return _ROLE.sub(lambda m: f"<code>{m.group(1).rsplit('.', 1)[-1] if m.group(0)[m.group(0).index('>') + 1] == '~' else m.group(1)}</code>", html)


def cli_help() -> str:
    """``bnnzoo --help`` and every command's ``--help``, as the parser prints them."""
    os.environ["COLUMNS"] = "100"
    from bnnzoo.cli import build_parser

    parser = build_parser()
    out = [f"```text\n{parser.format_help().strip()}\n```\n"]
    for action in parser._subparsers._group_actions:
        for name, sub in action.choices.items():
            out.append(f"### `bnnzoo {name}`\n\n```text\n{sub.format_help().strip()}\n```\n")
    return "\n".join(out)
