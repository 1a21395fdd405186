"""The one-way flow of the package, read from the source: every import of every module
under ``bnnzoo/`` (module level, inside functions and classes, under ``if TYPE_CHECKING``,
relative ones resolved, ``importlib.import_module`` with a literal name) goes to the
same layer or one below, never up.

    0  bnnzoo.validation, bnnzoo.results   plain containers and argument checks
       (and the top-level bnnzoo/__init__, for ``__version__`` only)
    1  bnnzoo.models, bnnzoo.data           what a model is; datasets (today neither
                                            imports the other; same layer, either may)
    2  bnnzoo.inference                     how a posterior is found
    3  bnnzoo.diagnostics                   how a finished run is judged
    4  bnnzoo.experiments                   studies that run engines
    5  bnnzoo.cli
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bnnzoo"

#: the layer of every top-level module or subpackage of bnnzoo (a prefix covers its submodules)
LAYERS = {
    "bnnzoo": 0,  # the top-level __init__: only ``from bnnzoo import __version__`` may import it
    "bnnzoo.validation": 0,
    "bnnzoo.results": 0,
    "bnnzoo.models": 1,
    "bnnzoo.data": 1,
    "bnnzoo.inference": 2,
    "bnnzoo.diagnostics": 3,
    "bnnzoo.experiments": 4,
    "bnnzoo.cli": 5,
}

#: the only names a module may import from the top-level package itself
TOP_LEVEL_NAMES = {"__version__"}


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    path: str  # its file, relative to the repository
    line: int
    target: str  # imported bnnzoo module or package
    names: tuple[str, ...] = ()  # for ``from target import names``: the names taken from the module itself

    def __str__(self) -> str:
        what = f"{self.target} ({', '.join(self.names)})" if self.names else self.target
        return f"{self.path}:{self.line}: {self.source} (layer {layer(self.source)}) imports {what} " \
               f"(layer {layer(self.target)})"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    """The layer of a bnnzoo module: the longest key of :data:`LAYERS` that is the module
    or a package above it (``bnnzoo`` itself only for exactly ``bnnzoo``)."""
    keys = [k for k in LAYERS if module == k or (k != "bnnzoo" and module.startswith(k + "."))]
    if not keys:
        raise KeyError(f"{module}: no layer in LAYERS")
    return LAYERS[max(keys, key=len)]


def _package_of(module: str) -> str:
    """The package a relative import of ``module`` starts from."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _resolve(module: str, level: int, name: str | None, line: int) -> str:
    if level == 0:
        return name or ""
    base = _package_of(module).split(".")
    if level - 1 >= len(base):
        raise ValueError(f"{module}:{line}: relative import beyond the top-level package")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _is_bnnzoo(name: str) -> bool:
    return name == "bnnzoo" or name.startswith("bnnzoo.")


def imports_of(module: str) -> list[Edge]:
    """Every import of a bnnzoo module by ``module``, wherever it stands in the file."""
    path = MODULES[module]
    rel = str(path.relative_to(PACKAGE.parent))
    edges = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            edges += [Edge(module, rel, node.lineno, alias.name) for alias in node.names if _is_bnnzoo(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node.level, node.module, node.lineno)
            if not _is_bnnzoo(target):
                continue
            # ``from pkg import name`` runs pkg/__init__ and, where pkg.name is a module, imports it too
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            plain = tuple(a.name for a in node.names if f"{target}.{a.name}" not in MODULES)
            if plain or target != "bnnzoo":  # ``from bnnzoo import models`` is an import of bnnzoo.models
                edges.append(Edge(module, rel, node.lineno, target, plain))
            edges += [Edge(module, rel, node.lineno, sub) for sub in subs]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in ("import_module", "__import__") and _is_bnnzoo(node.args[0].value):
                edges.append(Edge(module, rel, node.lineno, node.args[0].value))
    return edges


def _with_packages(target: str) -> list[str]:
    """``target`` and every package above it whose ``__init__`` importing it runs."""
    parts = target.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def upward_edges(module: str) -> list[Edge]:
    bad = []
    for edge in imports_of(module):
        if edge.target == "bnnzoo" and not (edge.names and set(edge.names) <= TOP_LEVEL_NAMES):
            bad.append(edge)  # the top-level package holds the version only
        elif layer(edge.target) > layer(module):
            bad.append(edge)
    return bad


def test_the_scan_sees_every_kind_of_import():
    # the parser itself, on the modules it reads: a function-level relative import, a
    # ``from package import submodule``, a top-level-version import
    arviz = {(e.line, e.target) for e in imports_of("bnnzoo.diagnostics.arviz")}
    assert any(t == "bnnzoo.results" for _, t in arviz)  # ``from ..results import split_mcmc`` inside a function
    assert any(t == "bnnzoo.models" for _, t in arviz) and any(t == "bnnzoo.models.bnn" for _, t in arviz)
    version = [e for e in imports_of("bnnzoo.diagnostics.arviz") if e.target == "bnnzoo"]
    assert version and all(e.names == ("__version__",) for e in version)
    assert "bnnzoo.models.zoo" in {e.target for e in imports_of("bnnzoo.models")}  # ``from . import zoo``
    cli = {e.target for e in imports_of("bnnzoo.cli")}  # every import of the cli is inside a function
    assert {"bnnzoo.experiments", "bnnzoo.inference", "bnnzoo.diagnostics", "bnnzoo.models"} <= cli
    assert layer("bnnzoo.inference.engines") == 2 and layer("bnnzoo") == 0 and layer("bnnzoo.cli") == 5


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_upward_import(module):
    bad = upward_edges(module)
    assert not bad, "upward import(s), a lower layer may never import a higher one:\n" + \
        "\n".join(f"  {edge}" for edge in bad)


def test_diagnostics_never_imports_inference():
    """Not directly, and not through anything it imports (the closure of the import graph,
    function-level imports and package ``__init__`` files included)."""
    start = sorted(m for m in MODULES if m == "bnnzoo.diagnostics" or m.startswith("bnnzoo.diagnostics."))
    assert "bnnzoo.diagnostics.arviz" in start and "bnnzoo.diagnostics.theory" in start
    seen, todo, via = set(start), list(start), {}
    while todo:
        module = todo.pop()
        for edge in imports_of(module):
            for target in _with_packages(edge.target):
                if target in MODULES and target not in seen:
                    seen.add(target)
                    via[target] = edge
                    todo.append(target)
    reached = sorted(m for m in seen if m == "bnnzoo.inference" or m.startswith("bnnzoo.inference."))

    def chain(module):  # the import path from diagnostics to the first inference module on it
        steps = []
        while module in via:
            steps.append(str(via[module]))
            module = via[module].source
        return "\n    <- ".join(steps)

    entries = [m for m in reached if not via[m].source.startswith("bnnzoo.inference")]
    assert not reached, f"bnnzoo.diagnostics reaches {len(reached)} module(s) of bnnzoo.inference, through:\n" + \
        "\n".join(f"  {chain(m)}" for m in entries)


def test_layer_table_covers_every_module():
    """A new top-level module or subpackage of bnnzoo needs a layer, and the table names
    nothing that does not exist."""
    top = {"bnnzoo"} | {".".join(m.split(".")[:2]) for m in MODULES if m != "bnnzoo"}
    missing = sorted(top - set(LAYERS))
    assert not missing, f"no layer in tests/test_layering.py LAYERS for: {missing}"
    stale = sorted(set(LAYERS) - top)
    assert not stale, f"LAYERS names modules that do not exist: {stale}"
    for module in MODULES:
        layer(module)


#: inside bnnzoo.inference, the potential holds mathematics and the runtime layer runs it
#: (docs/architecture.md, "The runtime layer"): the modules that choose or drive how it runs ...
RUNNERS = ("bnnzoo.inference.runtime", "bnnzoo.inference.kernels", "bnnzoo.inference.engines",
           "bnnzoo.inference.mcmc", "bnnzoo.inference.vi", "bnnzoo.inference.checkpoint")
#: ... and the runtime's services, which run what they are given (threads, compile="auto", the
#: potential's torch.compile graphs, CUDA graphs, traced graphs of a Pyro model's potential, inductor's
#: background set-up)
RUNTIME_SERVICES = ("bnnzoo.inference.threads", "bnnzoo.inference.compilation", "bnnzoo.inference.compiled_graphs",
                    "bnnzoo.inference.cuda_graphs", "bnnzoo.inference.traced_graphs", "bnnzoo.inference.prewarm")
#: importer (a module or a package) -> what it never imports
INFERENCE_NEVER = {
    "bnnzoo.inference.potential": RUNNERS,
    **{service: ("bnnzoo.inference.potential",) + RUNNERS for service in RUNTIME_SERVICES},
    "bnnzoo.inference.runtime": ("bnnzoo.inference.potential",) + RUNNERS[1:],
}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize("importer", sorted(INFERENCE_NEVER))
def test_the_potential_and_the_runtime_import_nothing_that_runs_them(importer):
    """The potential imports no runtime chooser, kernel or engine; the runtime's services and its
    chooser import no potential (potentials come in as arguments), kernel or engine."""
    modules = [m for m in MODULES if _within(m, importer)]
    assert modules, f"{importer}: no such module"
    bad = [edge for m in modules for edge in imports_of(m) for target in _with_packages(edge.target)
           if any(_within(target, never) for never in INFERENCE_NEVER[importer])]
    assert not bad, f"{importer} imports what runs it:\n" + "\n".join(f"  {edge}" for edge in bad)


def test_the_runtime_runs_the_potential_through_its_compiled_graphs():
    # the scan above sees these edges: the rule is not vacuous
    assert "bnnzoo.inference.compiled_graphs" in {e.target for e in imports_of("bnnzoo.inference.runtime")}
    assert "bnnzoo.inference.compiled_graphs" in {e.target for e in imports_of("bnnzoo.inference.potential.bnn")}
    assert "bnnzoo.inference.runtime" in {e.target for e in imports_of("bnnzoo.inference.kernels.hmc")}
