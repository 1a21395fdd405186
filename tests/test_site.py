"""The built site (``site/``, from ``make docs``) opened in headless Chromium, offline: the home
page, a guide page, an API page, a paper page, an example page and an algorithm page load, every image on them
loaded (``naturalWidth > 0``), the mathematics of an algorithm page is typeset by the local MathJax, and a screenshot
of each (kept in ``out/site-screenshots/``, not in git) shows the page and its figures painted.

``make docs`` runs this file after the build with ``BNNZOO_SITE_TEST=required``, so a missing
Chromium fails there; elsewhere (``make test``) it is skipped, with the reason, when the site has
not been built or no Chromium is installed (Debian: ``apt-get install chromium``)."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.support.browser import Browser, find_chromium
from tests.support.markdown import ROOT

SITE = ROOT / "site"
SHOTS = ROOT / "out" / "site-screenshots"
FIGURES = ROOT / "docs" / "papers" / "figures"
REQUIRED = os.environ.get("BNNZOO_SITE_TEST") == "required"

#: page of the site -> (the examples whose kept figures it must show, whether it has formulas)
PAGES = {
    "index.html": ([], False),
    "guide/diagnostics.html": ([], False),
    "api/models.html": ([], False),
    "papers/paper003.html": (["paper003_relu_hmc"], False),
    "examples/paper000_proximal_hmc.html": (["paper000_proximal_hmc"], False),
    "algorithms/hmc.html": ([], True),
}


def _missing(reason: str):
    if REQUIRED:
        pytest.fail(reason + " (BNNZOO_SITE_TEST=required)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    if not (SITE / "index.html").exists():
        _missing(f"no built site in {SITE.relative_to(ROOT)}/: run `make docs`")
    if find_chromium() is None:
        _missing("no Chromium installed (Debian: apt-get install chromium; or set CHROMIUM=)")
    with Browser() as b:
        yield b


#: what the page shows once its scripts ran: MathJax finished, then each image and formula's state
STATE = """(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const main = document.querySelector("article") || document.body;
  return {
    title: document.title,
    h1: (main.querySelector("h1") || {}).textContent || "",
    text: main.innerText.length,
    images: [...main.querySelectorAll("img")].map(i => ({
      src: i.getAttribute("src"), url: i.src, complete: i.complete, width: i.naturalWidth, height: i.naturalHeight,
      box: (r => [r.x + window.scrollX, r.y + window.scrollY, r.width, r.height])(i.getBoundingClientRect())})),
    math: main.querySelectorAll(".arithmatex").length,
    typeset: main.querySelectorAll(".arithmatex mjx-container").length,
  };
})()"""


def _kept(script: str) -> list[str]:
    return json.loads((FIGURES / script / "figures.json").read_text())["figures"]


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_with_its_figures(browser, page):
    path = SITE / page
    assert path.exists(), f"{path} missing from the built site"
    tab = browser.open(path.as_uri())
    state = browser.evaluate(tab, STATE, await_promise=True)
    assert state["title"].endswith("bnnzoo") and state["h1"].strip(), f"{page}: no title or heading: {state}"
    assert state["text"] > 500, f"{page}: the article shows {state['text']} characters"
    broken = [i["src"] for i in state["images"] if not (i["complete"] and i["width"] > 0 and i["height"] > 0)]
    assert not broken, f"{page}: images that did not load: {broken}"
    scripts, formulas = PAGES[page]
    wanted = [f"papers/figures/{script}/{name}" for script in scripts for name in _kept(script)]
    shown = [i["url"] for i in state["images"]]  # resolved: file:///.../site/papers/figures/...
    for figure in wanted:
        assert any(src.endswith(figure) for src in shown), f"{page}: {figure} not shown (images: {shown})"
    assert state["math"] > 0 or not formulas, f"{page}: no formula found"
    assert state["typeset"] == state["math"], \
        f"{page}: MathJax typeset {state['typeset']} of {state['math']} formulas"

    shot = browser.screenshot(tab, SHOTS / (page.replace("/", "_").removesuffix(".html") + ".png"))
    pixels = _pixels(shot)
    assert pixels.shape[1] >= 1000 and pixels.std() > 10, f"{shot}: a blank screenshot"
    for image in state["images"]:  # each figure is painted where the page lays it out: not a blank box
        x, y, w, h = (int(round(v)) for v in image["box"])
        if w > 50 and h > 50 and y + h <= pixels.shape[0]:
            region = pixels[y:y + h, x:x + w]
            assert region.std() > 10, f"{page}: {image['src']} is blank in the screenshot {shot}"


def _pixels(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("L"), dtype=float)
