"""What a PyPI user gets: ``import bnnzoo`` (and every subpackage) needs none of the optional
extras, the project URLs all point into one repository, and the classifiers name every Python
version CI runs the suite on."""

import re
import subprocess
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from tests.support.markdown import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

#: distribution name -> the module it installs, where they differ
MODULE = {"pytest-xdist": "xdist", "mkdocs-material": "material", "pymdown-extensions": "pymdownx",
          "django-static-mathjax": "mathjax", "mkdocstrings": "mkdocstrings"}


def _extras() -> set[str]:
    names = {re.match(r"[A-Za-z0-9_.-]+", req).group(0) for reqs in PROJECT["optional-dependencies"].values()
             for req in reqs}
    return {MODULE.get(n, n.replace("-", "_")) for n in names}


def test_import_needs_no_extra():
    extras = _extras()
    assert {"ray", "jax", "pytest", "mkdocs"} <= extras
    # None in sys.modules is what an absent module looks like: `import` raises ModuleNotFoundError
    # and importlib.util.find_spec returns None (as lazy importers, e.g. arviz_base's, check)
    code = f"""
import sys
sys.modules.update(dict.fromkeys({sorted(extras)!r}))
import bnnzoo, bnnzoo.models, bnnzoo.data, bnnzoo.inference, bnnzoo.diagnostics, bnnzoo.experiments, bnnzoo.cli
print(bnnzoo.__version__)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    import bnnzoo

    assert done.stdout.strip() == bnnzoo.__version__


def test_project_urls_point_into_one_repository():
    urls = PROJECT["urls"]
    assert {"Homepage", "Documentation", "Repository", "Issues", "Changelog"} <= set(urls)
    repository = urls["Repository"].rstrip("/")
    assert all(url == repository or url.startswith(repository + "/") for url in urls.values()), urls
    assert urls["Issues"] == repository + "/issues"
    for name, path in (("Changelog", "CHANGELOG.md"), ("Documentation", "docs")):  # the files they show exist
        assert urls[name].endswith("/" + path) and (ROOT / path).exists(), (name, urls[name])


def test_classifiers_name_every_python_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    makefile = (ROOT / "Makefile").read_text()
    versions = {f"3.{minor}" for minor in re.findall(r"^make test-py3(\d+)$", ci, re.M)}
    versions.add("3.11")  # `make test`: .venv, the Python 3.11 of these machines
    minimum = re.match(r">=(3\.\d+)", PROJECT["requires-python"]).group(1)
    classified = {c.rsplit(" :: ", 1)[1] for c in PROJECT["classifiers"]
                  if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)}
    assert versions <= classified, f"CI runs {sorted(versions)}, classifiers say {sorted(classified)}"
    assert min(classified, key=lambda v: int(v.split(".")[1])) == minimum
    assert all(f"test-py3{v.split('.')[1]}:" in makefile for v in versions - {"3.11"})
