"""The published site, checked in a real browser (issue 6).

A session fixture builds the book exactly as `make book` does (`jupyter-book build . --warningiserror
--keep-going`: chapters execute, with the cache), serves `_build/html` on 127.0.0.1 and drives Debian's
Chromium through Selenium and chromedriver. Every page of the table of contents is opened and checked
for JavaScript console errors, failed or 404 requests, requests to any other host, formulas MathJax did
not render, images that did not load or have no alt text or caption; then the sidebar order, search,
internal links and anchors, dark mode and the absence of solutions/ are checked, and screenshots of the
landing page and of a chapter are saved in artifacts/screenshots/.

Environment:
- TFMLIB_SITE_DIR: use an existing build (the `_build/html` folder, or the `_build` above it) instead
  of building.
- TFMLIB_SITE_TOC: the table of contents that build was made from, when it is not `_toc.yml` (for
  checking a partial build while chapters are being written).
- CI: a missing browser is a failure, not a skip.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urljoin, urlsplit

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
TOC = Path(os.environ.get("TFMLIB_SITE_TOC", ROOT / "_toc.yml"))
BUILD_TIMEOUT_S = 3 * 3600
PAGE_TIMEOUT_S = 60


# --------------------------------------------------------------------------------------------
# The table of contents


def toc_docnames(toc_path: Path = TOC) -> tuple[str, list[str], list[str]]:
    """(root, every page in order, the part captions) of a jb-book table of contents."""
    toc = yaml.safe_load(toc_path.read_text(encoding="utf8"))
    pages: list[str] = []

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                pages.append(str(PurePosixPath(entry["file"]).with_suffix("")))
            walk(entry.get("sections"))

    captions = []
    for part in toc.get("parts", []):
        captions.append(part.get("caption", ""))
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    root = str(PurePosixPath(toc["root"]).with_suffix(""))
    return root, pages, captions


ROOT_DOC, TOC_PAGES, TOC_CAPTIONS = toc_docnames()
ALL_PAGES = [ROOT_DOC] + TOC_PAGES
# Pages Sphinx makes besides the toc's, checked the same way.
SITE_PAGES = ["search", "genindex"]
CHAPTERS = [p for p in TOC_PAGES if re.fullmatch(r"book/\d\d_[a-z_]+", p)]


def page_url(docname: str) -> str:
    return f"/{docname}.html"


# --------------------------------------------------------------------------------------------
# Fixtures: the browser must exist, the site, the server, the browser session


def require_browser() -> None:
    from conftest import require_browser as require
    require("site checks")


@pytest.fixture(scope="session")
def site_dir() -> Path:
    require_browser()
    given = os.environ.get("TFMLIB_SITE_DIR")
    if given:
        html = Path(given)
        if (html / "html" / "index.html").is_file():
            html = html / "html"
        assert (html / "index.html").is_file(), f"TFMLIB_SITE_DIR={given} holds no built site (no index.html)"
        return html
    bin_dir = Path(sys.executable).parent
    jupyter_book = bin_dir / "jupyter-book"
    if not jupyter_book.exists():
        pytest.fail(f"jupyter-book is not installed next to {sys.executable}: run `make venv`")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([str(jupyter_book), "build", ".", "--warningiserror", "--keep-going"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        log = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in (proc.stdout + proc.stderr).splitlines()]
        noise = ("IPKernelApp", "MissingIDFieldWarning")  # kernel start-up chatter, not the book's problems
        problems = [line for line in log if re.search(r"WARNING|ERROR|Error|Traceback", line)
                    and not any(n in line for n in noise)]
        pytest.fail("the book build failed (warnings are errors):\n" + "\n".join((problems or log)[-60:]))
    return ROOT / "_build" / "html"


class Server:
    """A static file server on 127.0.0.1 that records what it was asked and what it answered."""

    def __init__(self, directory: Path):
        self.hits: list[tuple[str, int]] = []
        lock = threading.Lock()
        hits = self.hits

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def log_request(self, code="-", size="-"):
                try:
                    status = int(code)  # an int or an HTTPStatus
                except (TypeError, ValueError):
                    status = 0
                with lock:
                    hits.append((self.path, status))

        handler = functools.partial(Handler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.netloc = f"127.0.0.1:{self.httpd.server_address[1]}"
        self.base = f"http://{self.netloc}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="session")
def server(site_dir):
    srv = Server(site_dir)
    yield srv
    srv.close()


@pytest.fixture(scope="session")
def browser(site_dir):
    from conftest import headless_chromium

    profile = tempfile.mkdtemp(prefix="tfmlib-chromium-")
    driver = headless_chromium("1366,900", PAGE_TIMEOUT_S, profile, logging=True)
    driver.execute_cdp_cmd("Network.enable", {})
    yield driver
    driver.quit()


# --------------------------------------------------------------------------------------------
# Visiting a page and collecting what happened


@dataclass
class PageVisit:
    url: str
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # status >= 400 or loading failed
    server_errors: list[str] = field(default_factory=list)


# Waits for MathJax's first typesetting (when the page loads MathJax) and for web fonts.
WAIT_FOR_RENDERING = """
const done = arguments[arguments.length - 1];
const mathjax = (window.MathJax && MathJax.startup && MathJax.startup.promise) || Promise.resolve();
Promise.all([mathjax, document.fonts.ready]).then(() => done('ok'), (e) => done('error: ' + e));
"""

IMAGES_LOADED = """
document.querySelectorAll('img[loading="lazy"]').forEach((img) => { img.loading = 'eager'; });
window.scrollTo(0, document.body.scrollHeight);
return Array.from(document.images).every((img) => img.complete);
"""


def drain_logs(driver) -> tuple[list[dict], list[dict]]:
    return driver.get_log("browser"), driver.get_log("performance")


def visit(driver, server: Server, path: str, settle_s: float = 0.3) -> PageVisit:
    drain_logs(driver)
    server.hits.clear()
    url = server.base + path
    driver.get(url)
    deadline = time.monotonic() + PAGE_TIMEOUT_S
    while driver.execute_script("return document.readyState") != "complete":
        assert time.monotonic() < deadline, f"{path} did not finish loading"
        time.sleep(0.1)
    state = driver.execute_async_script(WAIT_FOR_RENDERING)
    assert state == "ok", f"{path}: waiting for MathJax and fonts failed: {state}"
    while not driver.execute_script(IMAGES_LOADED):
        assert time.monotonic() < deadline, f"{path}: images still loading after {PAGE_TIMEOUT_S} s"
        time.sleep(0.1)
    driver.execute_script("window.scrollTo(0, 0)")
    time.sleep(settle_s)  # late requests (fonts MathJax asks for while typesetting)
    console, perf = drain_logs(driver)
    result = PageVisit(url=url)
    result.console_errors = [e["message"] for e in console if e["level"] == "SEVERE"]
    urls_by_id: dict[str, str] = {}
    for entry in perf:
        message = json.loads(entry["message"])["message"]
        method, params = message["method"], message.get("params", {})
        if method == "Network.requestWillBeSent":
            urls_by_id[params["requestId"]] = params["request"]["url"]
            result.requests.append(params["request"]["url"])
        elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
            result.failures.append(f"HTTP {params['response']['status']}: {params['response']['url']}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            result.failures.append(f"{params.get('errorText')}: {urls_by_id.get(params['requestId'], '?')}")
    result.server_errors = [f"HTTP {code}: {p}" for p, code in list(server.hits) if code >= 400]
    return result


def foreign_requests(requests: list[str], netloc: str) -> list[str]:
    """Requests to any host but the local server (data:, blob: and the like stay inside the browser)."""
    foreign = []
    for url in requests:
        parts = urlsplit(url)
        if parts.scheme in ("http", "https", "ws", "wss", "ftp") and parts.netloc != netloc:
            foreign.append(url)
        elif parts.scheme not in ("http", "https", "ws", "wss", "ftp", "data", "blob", "about"):
            foreign.append(url)  # chrome-extension:, file:, ... : nothing a page of ours should ask for
    return foreign


# Text MathJax should have replaced: $$, \( \) \[ \], \begin{...}, or $...\command...$ in visible text
# outside code. Returns the offending snippets, the number of math elements, those not rendered, and
# MathJax's own error boxes.
MATH_STATE = r"""
const skip = 'pre, code, script, style, textarea, template, noscript, mjx-container, .highlight, kbd, samp';
const raw = /\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[^$\n]*\\[A-Za-z]+[^$\n]*\$/;
const leftovers = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
let node;
while ((node = walker.nextNode())) {
  const el = node.parentElement;
  if (!el || el.closest(skip)) continue;
  const m = node.textContent.match(raw);
  if (m) leftovers.push(node.textContent.trim().slice(0, 120));
}
const maths = Array.from(document.querySelectorAll('.math'));
const unrendered = maths.filter((el) => !el.querySelector('mjx-container')).map((el) => el.textContent.slice(0, 80));
const errors = Array.from(document.querySelectorAll('mjx-merror')).map((el) => el.getAttribute('data-mjx-error') || el.textContent);
return {leftovers, count: maths.length, unrendered, errors};
"""

IMAGES = """
return Array.from(document.images).map((img) => {
  const figure = img.closest('figure');
  const caption = figure && figure.querySelector('figcaption');
  return {src: img.currentSrc || img.src, complete: img.complete, width: img.naturalWidth,
          alt: (img.getAttribute('alt') || '').trim(), caption: caption ? caption.textContent.trim() : ''};
});
"""

FILE_NAME = re.compile(r"[\w./\\%-]+\.(png|jpe?g|svg|gif|webp)", re.IGNORECASE)


def image_problems(images: list[dict]) -> list[str]:
    problems = []
    for img in images:
        name = unquote(urlsplit(img["src"]).path)
        if not img["complete"] or img["width"] == 0:
            problems.append(f"not loaded: {name}")
        alt_is_text = bool(img["alt"]) and not FILE_NAME.fullmatch(img["alt"])
        if not alt_is_text and not img["caption"]:
            problems.append(f"no alt text (alt={img['alt']!r}) and no caption: {name}")
    return problems


# --------------------------------------------------------------------------------------------
# Every page of the table of contents


@pytest.mark.parametrize("docname", ALL_PAGES + SITE_PAGES)
def test_page_loads_cleanly(docname, browser, server, site_dir):
    assert (site_dir / f"{docname}.html").is_file(), f"{docname} is in {TOC.name} but was not built"
    page = visit(browser, server, page_url(docname))
    problems = []
    problems += [f"console error: {m}" for m in page.console_errors]
    problems += [f"failed request: {m}" for m in page.failures + page.server_errors]
    problems += [f"request to another host: {u}" for u in foreign_requests(page.requests, server.netloc)]
    math = browser.execute_script(MATH_STATE)
    problems += [f"raw TeX left in the text: {t!r}" for t in math["leftovers"]]
    problems += [f"formula not rendered by MathJax: {t!r}" for t in math["unrendered"]]
    problems += [f"MathJax error: {t!r}" for t in math["errors"]]
    problems += image_problems(browser.execute_script(IMAGES))
    shown = problems[:40] + ([f"... and {len(problems) - 40} more"] if len(problems) > 40 else [])
    assert not problems, f"{docname}:\n  " + "\n  ".join(shown)


def test_mathjax_is_served_by_the_site(browser, server):
    """A page with formulas loads MathJax and its fonts from the site itself, and MathJax renders."""
    page = visit(browser, server, page_url("book/appendix/notation"))
    local = [u for u in page.requests if urlsplit(u).netloc == server.netloc]
    assert any(u.split("?")[0].endswith("/_static/mathjax/tex-chtml.js") for u in local), page.requests
    assert any("/_static/mathjax/output/chtml/fonts/" in u for u in local), "MathJax's fonts were not loaded"
    assert browser.execute_script("return document.querySelectorAll('mjx-container').length") > 10


# --------------------------------------------------------------------------------------------
# Navigation: sidebar, search, links and anchors


def test_sidebar_lists_the_toc_in_order(browser, server):
    visit(browser, server, page_url(ROOT_DOC))
    links = browser.execute_script("""
        return Array.from(document.querySelectorAll(
            'nav.bd-docs-nav li.toctree-l1 > a.reference.internal, nav.bd-docs-nav li.toctree-l2 > a.reference.internal'))
            .map((a) => [a.href, a.textContent.trim()]);""")
    captions = browser.execute_script("""
        return Array.from(document.querySelectorAll('nav.bd-docs-nav p.caption'))
            .map((p) => p.textContent.trim());""")
    shown = [urlsplit(href).path.lstrip("/").removesuffix(".html") for href, _ in links]
    # The landing page comes first (home_page_in_navbar), then every page of the toc in its order (an exercise
    # is its chapter's section: a second-level entry right under the chapter).
    assert shown == ALL_PAGES, f"sidebar order differs from {TOC.name}:\n{shown}\n!=\n{ALL_PAGES}"
    assert captions == TOC_CAPTIONS
    # The chapters are numbered 1..9: the notes' order, then chapter 9 putting the pieces together.
    titles = [text for (href, text), doc in zip(links, shown) if doc in CHAPTERS]
    assert len(titles) == len(CHAPTERS) == 9, titles
    assert [t.split(".")[0] for t in titles] == [str(i) for i in range(1, 10)], titles


def test_each_chapter_is_followed_by_its_exercise_in_the_toc():
    """Issue 35: reading in order, exercise N comes after chapter N and before chapter N+1 (no build needed)."""
    exercises = sorted(f"notebooks/{p.parent.name}/{p.stem}" for p in (ROOT / "notebooks").glob("*/*.ipynb"))
    assert len(exercises) == len(CHAPTERS) == 9, (exercises, CHAPTERS)
    for chapter, following in zip(CHAPTERS, CHAPTERS[1:] + [None]):
        name = chapter.split("/")[-1]
        at = TOC_PAGES.index(chapter)
        assert TOC_PAGES[at + 1] == f"notebooks/{name}/{name}", f"{chapter} is not followed by its exercise"
        assert following is None or TOC_PAGES[at + 2] == following, f"more than the exercise between {chapter} and {following}"
    assert set(exercises) <= set(TOC_PAGES)


def test_next_and_previous_follow_the_reading_order(site_dir):
    """Each page's "next" button leads to the page after it in the toc (chapter N, exercise N, chapter N+1 ...) and
    "previous" back (read from the built pages' footers)."""
    def link(docname, side):
        html = (site_dir / f"{docname}.html").read_text(encoding="utf8")
        found = re.search(rf'<a class="{side}"\s+href="([^"]+)"', html)
        return found and urlsplit(urljoin(f"http://site/{docname}.html", found[1])).path.lstrip("/").removesuffix(".html")
    for before, after in zip(ALL_PAGES, ALL_PAGES[1:]):
        assert link(before, "right-next") == after, f"next after {before}: {link(before, 'right-next')}, not {after}"
        assert link(after, "left-prev") == before, f"previous before {after}: {link(after, 'left-prev')}, not {before}"


def test_search_finds_attention(browser, server):
    visit(browser, server, "/search.html?q=attention")
    deadline = time.monotonic() + PAGE_TIMEOUT_S
    results: list[str] = []
    while time.monotonic() < deadline:
        results = browser.execute_script(
            "return Array.from(document.querySelectorAll('#search-results ul.search li a'))"
            ".map((a) => a.getAttribute('href'));")
        finished = browser.execute_script(
            "const s = document.querySelector('#search-results p.search-summary');"
            "return !!(s && s.textContent.trim());")
        if results and finished:
            break
        time.sleep(0.2)
    assert results, "searching for 'attention' found nothing"
    found = {urlsplit(href).path.removesuffix(".html").lstrip("/") for href in results}
    assert found & set(CHAPTERS), f"no chapter among the results: {sorted(found)}"


class _Anchors(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])


@functools.lru_cache(maxsize=None)
def _parse(path: Path) -> _Anchors:
    parser = _Anchors()
    parser.feed(path.read_text(encoding="utf8"))
    return parser


def test_internal_links_and_anchors_resolve(site_dir):
    broken = []
    for docname in ALL_PAGES:
        page = site_dir / f"{docname}.html"
        base = f"http://site/{docname}.html"
        for href in _parse(page).links:
            parts = urlsplit(urljoin(base, href))
            if parts.scheme != "http" or parts.netloc != "site":
                continue  # external links, mailto:, javascript:
            target = site_dir / unquote(parts.path).lstrip("/")
            if parts.path.endswith("/"):
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{docname}: {href} -> missing {target.relative_to(site_dir)}")
                continue
            if parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _parse(target).ids:
                broken.append(f"{docname}: {href} -> no anchor #{parts.fragment} in {target.relative_to(site_dir)}")
    assert not broken, "broken links:\n  " + "\n  ".join(broken)


def _dropdown_links(driver, label: str) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map((a) => a.getAttribute('href'));",
        f".dropdown-{label} a[href]")


def test_launch_and_download_buttons(browser, server, site_dir):
    """Binder for every executable page, Colab for the .ipynb exercises, a notebook download everywhere."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf8"))
    binder = config["launch_buttons"]["binderhub_url"].rstrip("/")
    colab = config["launch_buttons"]["colab_url"].rstrip("/")
    exercises = [p for p in TOC_PAGES if p.startswith("notebooks/")]
    for docname in CHAPTERS[:1] + exercises[:1]:
        visit(browser, server, page_url(docname))
        launch = _dropdown_links(browser, "launch-buttons")
        assert any(u.startswith(binder + "/v2/") and docname in u for u in launch), (docname, launch)
        colab_links = [u for u in launch if u.startswith(colab)]
        if docname in exercises:
            assert colab_links and all(u.endswith(".ipynb") for u in colab_links), (docname, launch)
        else:  # Colab cannot open a MyST Markdown file
            assert not colab_links, (docname, launch)
        downloads = _dropdown_links(browser, "download-buttons")
        notebooks = [u for u in downloads if u.split("?")[0].endswith(".ipynb")]
        assert notebooks, f"{docname}: no notebook download in {downloads}"
        page_dir = (site_dir / docname).parent
        assert all((page_dir / unquote(u)).resolve().is_file() for u in notebooks), notebooks


# --------------------------------------------------------------------------------------------
# Dark mode, what is not published, screenshots


def _theme(driver) -> dict:
    return driver.execute_script("""
        const bg = getComputedStyle(document.body).backgroundColor.match(/\\d+(\\.\\d+)?/g).map(Number);
        const fg = getComputedStyle(document.querySelector('main') || document.body).color.match(/\\d+(\\.\\d+)?/g).map(Number);
        const lum = (c) => (0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]) / 255;
        return {mode: document.documentElement.dataset.mode, theme: document.documentElement.dataset.theme,
                background: lum(bg), text: lum(fg)};""")


def _chapter_for_screenshots() -> str:
    return "book/03_self_attention" if "book/03_self_attention" in CHAPTERS else (CHAPTERS or TOC_PAGES)[0]


def test_dark_mode(browser, server):
    chapter = _chapter_for_screenshots()
    try:
        # The reader's system asks for dark: the default mode ("auto") follows it.
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        page = visit(browser, server, page_url(chapter))
        theme = _theme(browser)
        assert theme["mode"] == "auto" and theme["theme"] == "dark", theme
        assert theme["background"] < 0.3 < theme["text"], f"dark mode does not look dark: {theme}"
        assert not page.console_errors, page.console_errors
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SCREENSHOTS / "chapter_dark.png"))
        # The theme switch in the header cycles the mode and the page follows.
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
        visit(browser, server, page_url(chapter))
        assert _theme(browser)["theme"] == "light"
        button = browser.execute_script(
            "return Array.from(document.querySelectorAll('button.theme-switch-button'))"
            ".find((b) => b.offsetParent !== null);")
        assert button is not None, "no visible theme switch button"
        seen = set()
        for _ in range(3):
            button.click()
            time.sleep(0.2)
            state = _theme(browser)
            seen.add(state["mode"])
            if state["mode"] == "dark":
                assert state["theme"] == "dark" and state["background"] < 0.3, state
        assert "dark" in seen, f"the theme switch never selected dark mode: {seen}"
        errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        browser.execute_script("localStorage.clear()")
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def test_solutions_are_not_published(site_dir):
    published = [p.relative_to(site_dir) for p in site_dir.rglob("*") if "solutions" in p.relative_to(site_dir).parts]
    assert not published, f"solutions/ is on the site: {published[:5]}"
    index = (site_dir / "searchindex.js").read_text(encoding="utf8")
    assert "solutions/" not in index


def test_no_graded_answer_is_shown_unfolded(site_dir):
    """No page shows the body of a graded function outside a closed <details> (issue 17).

    The bodies are the solutions' (solutions/*/*.ipynb) and tfmlib's functions of the same names; a body counts
    as shown when its lines, without comments and whitespace, appear in order or mostly (scripts/spoilers.py).
    The library's listings are folded after each chapter's exercise link: opening every <details> must find
    each of them again, so the check is not passing on pages it cannot read.
    """
    import spoilers

    bodies = spoilers.graded_bodies()
    shown = spoilers.shown_bodies(site_dir, bodies)
    assert not shown, "graded answers shown unfolded:\n  " + "\n  ".join(shown)
    unfolded = [p for p in spoilers.read_pages(site_dir, unfold=True) if p.name.startswith("book/")]
    library = [b for b in bodies if b.source.startswith("tfmlib/")]
    missing = [f"{b.function} ({b.source})" for b in library if not any(p.shows(b) == "verbatim" for p in unfolded)]
    assert not missing, f"no chapter holds these listings, even folded: {missing}"


def test_screenshots(browser, server):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for name, docname in (("landing", ROOT_DOC), ("chapter", _chapter_for_screenshots())):
        visit(browser, server, page_url(docname))
        # As a first-time reader sees it: no remembered sidebar scroll position or colour mode.
        browser.execute_script("sessionStorage.clear(); localStorage.clear();")
        page = visit(browser, server, page_url(docname))
        assert not page.console_errors, page.console_errors
        target = SCREENSHOTS / f"{name}.png"
        assert browser.save_screenshot(str(target)), f"could not save {target}"
        assert target.stat().st_size > 10_000, f"{target} is suspiciously small"
