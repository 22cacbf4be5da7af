"""Self-study in JupyterLab, in a real browser (issue 11): `make lab`'s server, driven by headless Chromium.

One JupyterLab is started exactly as `make lab` starts it (the Makefile target itself, on a free localhost port,
on a throw-away copy of book/ and notebooks/ so the repository is never written), and a learner's loop is played:
open exercise 3, write a wrong answer (no 1/√d_k), run the notebook and read the diagnosis that names the
mistake, fix it, run again, press nbgrader's Validate and read "Success"; then open chapter 1 (a MyST file) as a
notebook and run its first cells from book/, as the book build does.  Along the way: no error dialog or error
notification, none of nbgrader's instructor or exchange tools (Formgrader, Create Assignment, Assignment List,
"Error fetching courses"), and nothing alarming in the server's log ("No nbgrader_config.py", ExchangeError,
tracebacks).  Validate on the wrong answer names the mistake before the test cell.  Then a chapter is opened and
run in full, autosave fires (its interval is set to a few seconds here), and the file is byte for byte what it
was; Validate on the chapter answers with one sentence (issue 20).  The chapter just opened shows no unsaved
mark, and after Run All its prose shows the numbers it glues (jupyterlab-myst's inline expressions, issue 35).  A screenshot of each step is written to
artifacts/test_lab/ (git-ignored; CI keeps it).

The fast tests read the configuration: learner and instructor modes, and the links between chapters and exercises.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "artifacts" / "test_lab"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
EXERCISE = "03_self_attention"
CHAPTER = "book/01_rnn_limits.md"
RUN_CHAPTER = "book/03_self_attention.md"  # the chapter the issue-20 learner opened and ran
VARIANCES = "The measured variances are"  # RUN_CHAPTER's prose with three glued numbers
WAIT_S = 180
AUTOSAVE_S = 3  # JupyterLab's autosave interval in this test (the default is 120 s)

# What the learner must never see (the quiet learner mode) and what the server must never log.
FORBIDDEN_UI = ("Error fetching courses", "exchange directory", "Formgrader", "Create Assignment", "Assignment List")
FORBIDDEN_LOG = ("No nbgrader_config.py", "ExchangeError", "Traceback", "Use --allow-root")


def require_browser() -> None:
    from conftest import require_browser as require
    require("JupyterLab")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_browser()
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "course"
    shutil.copytree(REPO / "book", root / "book", ignore=shutil.ignore_patterns("_build", ".ipynb_checkpoints"))
    shutil.copytree(REPO / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(tmp / "user-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"))
    args = (f"--no-browser --port={port} --ServerApp.ip=127.0.0.1 --IdentityProvider.token={token} "
            f"--ServerApp.root_dir={root} --ServerApp.port_retries=0")
    log_path = tmp / "lab.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["make", "-s", "-C", str(REPO), "lab", f"LAB_ARGS={args}"], stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"JupyterLab did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield {"base": base, "token": token, "root": root, "log": log_path}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def browser(lab):
    from conftest import chromium_session
    with chromium_session("1400,950", WAIT_S, "tfmlib-lab-chromium-") as driver:
        yield driver


# --------------------------------------------------------------------------------------------------------------
# Driving JupyterLab
# --------------------------------------------------------------------------------------------------------------
class Lab:
    def __init__(self, driver, lab, first_step=0):
        self.d, self.lab = driver, lab
        self.step = first_step
        OUT.mkdir(parents=True, exist_ok=True)
        for old in OUT.glob("*.png") if first_step == 0 else ():
            old.unlink()

    def wait(self, condition, what, timeout=WAIT_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(0.3)
        self.shot("timeout")
        raise AssertionError(f"timed out waiting for {what}; screenshot in {OUT}")

    def shot(self, name):
        self.step += 1
        path = OUT / f"{self.step:02d}_{name}.png"
        self.d.save_screenshot(str(path))
        return path

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def open(self, path, code_cells):
        self.d.get(f"{self.lab['base']}/lab/tree/{path}?token={self.lab['token']}&reset")
        self.wait(lambda: self.js(ACTIVE + "return p && p.querySelectorAll('.jp-CodeCell').length;") == code_cells,
                  f"{path} to open as a notebook with its {code_cells} code cells")
        self.wait(lambda: self.kernel_idle(), "the kernel to start")

    def kernel_idle(self):
        """The status bar says the notebook's Python kernel is idle."""
        return bool(self.js("return /Python 3[^|\\n]*\\|\\s*Idle/.test(document.body.innerText);"))

    def code_cells(self):
        return self.js(ACTIVE + "return [...p.querySelectorAll('.jp-CodeCell')].length;")

    def set_code(self, index, text):
        """Replace the text of the index-th code cell of the active notebook, through its CodeMirror editor."""
        self.js(ACTIVE + "p.querySelectorAll('.jp-CodeCell')[arguments[0]].scrollIntoView();", index)
        self.wait(lambda: self.js(ACTIVE + "return !!p.querySelectorAll('.jp-CodeCell')[arguments[0]]"
                                  ".querySelector('.cm-content');", index), "the cell's editor")
        length = self.js(ACTIVE + """
            const content = p.querySelectorAll('.jp-CodeCell')[arguments[0]].querySelector('.cm-content');
            const cv = content.cmView;
            const view = cv.rootView ? cv.rootView.view : cv.view;
            view.dispatch({changes: {from: 0, to: view.state.doc.length, insert: arguments[1]}});
            return view.state.doc.length;""", index, text)
        assert length == len(text)

    def menu(self, top, item):
        from selenium.common.exceptions import ElementClickInterceptedException
        from selenium.webdriver.common.by import By

        def opened():
            try:
                self.d.find_element(By.XPATH, f"//div[contains(@class,'lm-MenuBar-itemLabel') and text()='{top}']").click()
                return True
            except ElementClickInterceptedException:   # a page just loaded: its menu bar may not be laid out yet
                return False
        self.wait(opened, f"the menu {top} to take a click")
        entry = self.wait(lambda: [e for e in self.d.find_elements(
            By.XPATH, f"//div[contains(@class,'lm-Menu-itemLabel') and text()='{item}']") if e.is_displayed()],
            f"the menu item {top} > {item}")
        entry[0].click()

    def run_all(self, timeout=WAIT_S):
        prompts = ACTIVE + "return [...p.querySelectorAll('.jp-InputPrompt')].map(e => e.textContent).join('|');"
        before = self.js(prompts)
        self.menu("Run", "Run All Cells")
        # on a busy machine the kernel may still look idle a second later: wait for the run to start
        self.wait(lambda: self.js(prompts) != before, "the run to start", timeout=timeout)
        self.wait(lambda: self.kernel_idle() and not self.js(
            ACTIVE + "return [...p.querySelectorAll('.jp-InputPrompt')].some(e => e.textContent.includes('[*]'));"),
            "the notebook to finish running", timeout=timeout)

    def dialog(self):
        return self.js("const d = document.querySelector('.jp-Dialog'); return d && d.innerText;")

    def validate(self, name):
        """Press nbgrader's Validate in the active notebook's toolbar; the result dialog's text (left open)."""
        from selenium.webdriver.common.by import By
        buttons = self.wait(lambda: [b for b in self.d.find_elements(
            By.XPATH, "//*[contains(@class,'jp-NotebookPanel') and not(contains(@class,'lm-mod-hidden'))]"
                      "//*[contains(@class,'jp-Toolbar')]//*[normalize-space(text())='Validate']") if b.is_displayed()],
            "nbgrader's Validate button")
        buttons[0].click()
        self.wait(lambda: self.dialog(), "the validation result", timeout=300)
        self.wait(lambda: not any(w in (self.dialog() or "") for w in ("Validating", "Saving")),
                  "validation to finish", timeout=300)
        self.shot(name)
        return self.dialog()

    def close_dialog(self):
        from selenium.webdriver.common.by import By
        self.d.find_element(By.CSS_SELECTOR, ".jp-Dialog .jp-Dialog-button.jp-mod-accept, .jp-Dialog .jp-Dialog-button").click()
        self.wait(lambda: not self.dialog(), "the dialog to close")

    def dirty(self):
        """The active document's tab shows unsaved changes."""
        return self.js("return !!document.querySelector('.lm-TabBar-tab.lm-mod-current.jp-mod-dirty');")

    def prose(self, words):
        """The rendered text (jupyterlab-myst's .myst) of the active notebook's first Markdown cell with ``words``."""
        return self.js(ACTIVE + "const c = [...p.querySelectorAll('.jp-MarkdownCell')].find(c => c.textContent.includes("
                                "arguments[0])); const r = c && c.querySelector('.myst, .jp-MarkdownOutput');"
                                "return r ? r.textContent : '';", words) or ""

    def outputs(self, index):
        return self.js(ACTIVE + "const c = p.querySelectorAll('.jp-CodeCell')[arguments[0]];"
                                "return c.querySelector('.jp-OutputArea') ? c.querySelector('.jp-OutputArea').textContent : '';",
                       index)

    def assert_quiet(self, allow_dialog=None):
        """No error dialog or notification, and none of nbgrader's instructor/exchange tools on screen."""
        dialogs = self.js("return [...document.querySelectorAll('.jp-Dialog')].map(d => d.innerText);")
        for text in dialogs:
            assert allow_dialog and allow_dialog in text, f"unexpected dialog: {text[:500]}"
        toasts = self.js("return [...document.querySelectorAll('.Toastify__toast--error, .jp-toast-error')]"
                         ".map(t => t.innerText);")
        assert not toasts, f"error notifications: {toasts}"
        text = self.js("return document.body.innerText;")
        menus = self.js("return [...document.querySelectorAll('.lm-MenuBar-itemLabel')].map(e => e.textContent);")
        assert "Nbgrader" not in menus, menus
        shown = [f for f in FORBIDDEN_UI if f in text]
        assert not shown, f"instructor or exchange UI on screen: {shown}"


ACTIVE = "const p = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');"


def set_autosave(lab, seconds):
    """Set JupyterLab's autosave interval through its settings API (kept in the test's throw-away settings)."""
    import json
    raw = json.dumps({"autosave": True, "autosaveInterval": seconds})
    request = urllib.request.Request(
        f"{lab['base']}/lab/api/settings/@jupyterlab/docmanager-extension:plugin?token={lab['token']}",
        data=json.dumps({"raw": raw}).encode(), method="PUT", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        assert r.status in (200, 204), r.status


def _code(path):
    import nbformat
    return [c for c in nbformat.read(str(path), as_version=4).cells if c.cell_type == "code"]


def _answers():
    """The solution of each answer cell of the exercise, as a learner would type it (markers removed)."""
    import nbformat
    nb = nbformat.read(str(REPO / "solutions" / EXERCISE / f"{EXERCISE}.ipynb"), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    return {i: re.sub(r" *### (BEGIN|END) SOLUTION\n?", "", c.source) for i, c in enumerate(code)
            if c.metadata.get("nbgrader", {}).get("solution")}


@pytest.mark.browser
@pytest.mark.slow
def test_learner_loop_in_jupyterlab(lab, browser):
    ui = Lab(browser, lab)
    ui.open(f"notebooks/{EXERCISE}/{EXERCISE}.ipynb", len(_code(REPO / "notebooks" / EXERCISE / f"{EXERCISE}.ipynb")))
    ui.shot("exercise_opened")
    ui.assert_quiet()

    answers = _answers()
    sdpa = min(answers)
    assert "math.sqrt(d_k)" in answers[sdpa]
    for index, code in answers.items():
        ui.set_code(index, code.replace("/ math.sqrt(d_k)", "") if index == sdpa else code)
    ui.run_all()
    outputs = [ui.outputs(i) for i in range(ui.code_cells())]
    ui.shot("wrong_answer_run")
    assert any("CheckFailure" in o for o in outputs), outputs
    failing = next(i for i, o in enumerate(outputs) if "CheckFailure" in o)
    message = ui.outputs(failing)
    ui.js(ACTIVE + "p.querySelectorAll('.jp-CodeCell')[arguments[0]].scrollIntoView();", failing)
    ui.shot("wrong_answer_diagnosis")
    assert "Your scores are not divided by √d_k." in message, message
    assert "scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)" in message, message
    assert "/tfmcheck/" not in message and "checking.py" not in message, message  # no frame of the checking package
    ui.assert_quiet()
    # Validate's failure dialog: the named mistake comes first, before the test cell and the traceback
    dialog = ui.validate("validate_wrong_answer")
    assert "The following cell failed:" in dialog, dialog
    first = dialog.split("The following cell failed:", 1)[1].strip()
    assert first.startswith("CheckFailure:") and "Your scores are not divided by √d_k." in first.splitlines()[0], dialog
    assert first.index("Your scores are not divided") < first.index("The test cell:") < first.index("Traceback"), dialog
    ui.close_dialog()

    ui.set_code(sdpa, answers[sdpa])
    ui.run_all()
    outputs = [ui.outputs(i) for i in range(ui.code_cells())]
    assert not any("Error" in o for o in outputs), outputs
    assert sum("Visible tests passed." in o for o in outputs) == 5, outputs
    ui.shot("fixed_tests_pass")

    dialog = ui.validate("validate_success")
    assert "Success! Your notebook passes all the tests." in dialog, dialog
    ui.assert_quiet(allow_dialog="Success")
    ui.close_dialog()
    from selenium.webdriver.common.by import By

    # a chapter, opened as a notebook (Jupytext, MyST) and run from book/ like the book build
    import jupytext
    ui.open(CHAPTER, len([c for c in jupytext.read(REPO / CHAPTER).cells if c.cell_type == "code"]))
    ui.shot("chapter_opened")
    ui.assert_quiet()
    assert ui.js(ACTIVE + "return p.querySelectorAll('.jp-CodeCell').length;") > 10
    # its MyST rendered by jupyterlab-myst (issue 35): the admonition as a titled box, citations as the site labels them
    assert "(Vaswani et al., 2017)" in ui.prose("three wishes"), ui.prose("three wishes")
    box = ACTIVE + ("const c = [...p.querySelectorAll('.jp-MarkdownCell')].find(c => c.textContent.includes("
                    "'What the notes say')); c.scrollIntoView(); const t = c.querySelector("
                    "'.myst aside.myst-admonition .myst-admonition-header-text'); return t && t.textContent;")
    assert ui.wait(lambda: ui.js(box), "the admonition's box") == "What the notes say — what we measured"
    ui.shot("chapter_admonition")
    browser.find_element(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt").click()
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    ran = ACTIVE + """
        const prompts = [...p.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].slice(0, 3).map(e => e.textContent);
        return prompts.filter(t => /\\[\\d+\\]/.test(t)).length;"""
    for _ in range(12):  # Shift+Enter runs a cell and moves on (markdown cells in between just render)
        if ui.js(ran) == 3:
            break
        ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
        time.sleep(0.5)
        ui.wait(lambda: ui.kernel_idle(), "the kernel to finish a chapter cell")
    ui.wait(lambda: ui.js(ran) == 3, "the chapter's first three code cells to run")
    first = [ui.outputs(i) for i in range(3)]
    ui.js(ACTIVE + "p.querySelectorAll('.jp-CodeCell')[1].scrollIntoView();")
    ui.shot("chapter_cells_run")
    assert "device:" in first[0] and "equal to torch.nn.RNN: True" in first[1], first
    assert not any("Error" in o or "Traceback" in o for o in first), first
    ui.assert_quiet()

    log = lab["log"].read_text()
    assert not [f for f in FORBIDDEN_LOG if f in log], log[-5000:]
    assert "nbgrader.server_extensions.formgrader | extension was successfully" not in log


@pytest.mark.browser
@pytest.mark.slow
def test_a_chapter_opened_and_run_is_left_as_it_is(lab, browser):
    """Issue 20: opening and running a chapter, autosave included, leaves the file byte for byte as it was;
    Validate on the chapter answers with one sentence and leaves the file alone too; a cell the learner edits
    is saved (editing stays their choice).  Issue 35: the chapter just opened shows no unsaved mark, its MyST is
    rendered, and after Run All its prose shows the glued numbers (a screenshot is copied to the temporary
    folder, test_lab_glued_numbers.png); Validate's sentence comes without the word "error"."""
    import jupytext
    ui = Lab(browser, lab, first_step=50)
    path = lab["root"] / RUN_CHAPTER
    before = path.read_bytes()
    def skipped():
        return lab["log"].read_text().count(f"{RUN_CHAPTER}: no cell changed, the file is left as it is")
    code = [c for c in jupytext.reads(before.decode(), fmt="md:myst").cells if c.cell_type == "code"]
    set_autosave(lab, AUTOSAVE_S)  # the page is loaded afresh by ui.open, with this setting
    seen = skipped()
    ui.open(RUN_CHAPTER, len(code))
    ui.shot("run_chapter_opened")
    ui.assert_quiet()
    # just opened, its kernel started: nothing changed, so no unsaved mark on the tab (issue 35)
    time.sleep(2)
    assert not ui.dirty(), "a chapter just opened shows the unsaved mark"
    # its MyST is rendered (jupyterlab-myst): no raw roles; the glued numbers show once the cells have run
    assert "{glue:text}" not in ui.prose(VARIANCES) and "{cite}" not in ui.prose(VARIANCES)
    assert "(Ba et al., 2016)" in ui.prose(VARIANCES), ui.prose(VARIANCES)
    assert 'glued("ch3_var_4:.1f")' in ui.prose(VARIANCES), ui.prose(VARIANCES)

    ui.run_all(timeout=900)
    # Run All stops at the first error, so the last code cell has a number only when every cell ran cleanly
    last = ACTIVE + "const c = p.querySelectorAll('.jp-CodeCell'); c[c.length - 1].scrollIntoView();" \
                    "return c[c.length - 1].querySelector('.jp-InputPrompt').textContent;"
    ui.wait(lambda: re.search(r"\[\d+\]", ui.js(last) or ""), "the chapter's last cell to have run")
    ui.shot("run_chapter_ran")
    # the prose shows the numbers the chapter measured, formatted as on the site: Var(q.k) ~ d_k (3.6)
    ui.js(ACTIVE + "[...p.querySelectorAll('.jp-MarkdownCell')].find(c => c.textContent.includes(arguments[0]))"
                   ".scrollIntoView();", VARIANCES)
    measured = ui.wait(lambda: re.search(r"variances are (\d+\.\d),\s+(\d+\.\d)\s+and\s+(\d+)\s+for", ui.prose(VARIANCES)),
                       "the glued variances in the chapter's prose")
    shown = ui.shot("run_chapter_glued_numbers")
    shutil.copy(shown, Path(tempfile.gettempdir()) / "test_lab_glued_numbers.png")
    assert all(d_k / 2 < float(v) < 2 * d_k for d_k, v in zip((4, 64, 512), measured.groups())), measured.groups()
    assert "glued(" not in ui.prose(VARIANCES), ui.prose(VARIANCES)
    # autosave fires (every AUTOSAVE_S here), the server leaves the file alone and the tab is clean again
    ui.wait(lambda: skipped() > seen, "an autosave of the chapter", timeout=20 * AUTOSAVE_S)
    ui.wait(lambda: not ui.dirty(), "the chapter's tab to show no unsaved changes", timeout=20 * AUTOSAVE_S)
    time.sleep(2 * AUTOSAVE_S)
    assert path.read_bytes() == before, "opening and running the chapter changed the file"
    ui.assert_quiet()

    # nbgrader's Validate sits on every notebook's toolbar; on a chapter it answers with one plain sentence
    dialog = ui.validate("validate_chapter")
    sentence = "03_self_attention.md is not one of them, so there is nothing to validate here."
    assert sentence in dialog and "Traceback" not in dialog and "NotJSONError" not in dialog, dialog
    assert "error" not in dialog.lower(), dialog  # the sentence alone (scripts/lab/custom/custom.css)
    ui.close_dialog()
    assert path.read_bytes() == before, "Validate (which saves first) changed the chapter"

    # an edit is the learner's choice, and it is saved
    ui.set_code(0, code[0].source + "\n# a learner's note")
    ui.wait(lambda: b"# a learner's note" in path.read_bytes(), "the edited chapter to be saved", timeout=20 * AUTOSAVE_S)
    ui.shot("run_chapter_edited")
    log = lab["log"].read_text()
    assert not [f for f in FORBIDDEN_LOG if f in log], log[-5000:]


# --------------------------------------------------------------------------------------------------------------
# Fast checks of the configuration (no server, no browser)
# --------------------------------------------------------------------------------------------------------------
def _load(folder, name):
    from traitlets.config.loader import PyFileConfigLoader
    return PyFileConfigLoader(name, path=str(REPO / "scripts" / "lab" / folder)).load_config()


def test_learner_mode_keeps_validate_and_drops_the_instructor_tools():
    import json
    cfg = _load("learner", "jupyter_server_config.py")
    ext = cfg.ServerApp.jpserver_extensions
    # Validate is nbgrader's handler served by course_lab (a sentence on chapters, the named mistake first)
    assert ext["course_lab"] is True and ext["nbgrader.server_extensions.validate_assignment"] is False
    assert cfg.ServerApp.contents_manager_class.__name__ == "ChapterKeepingContentsManager"
    assert not any(ext[f"nbgrader.server_extensions.{e}"] for e in ("formgrader", "assignment_list", "course_list"))
    assert ext["tfmgrader.formgrader_page"] is False
    assert cfg.ServerApp.root_dir == str(REPO)
    assert cfg.ServerApp.get("allow_root", False) == (os.geteuid() == 0)
    page = json.loads((REPO / "scripts" / "lab" / "learner" / "labconfig" / "page_config.json").read_text())
    disabled = {k for k, v in page["disabledExtensions"].items() if v}
    assert disabled == {f"@jupyter/nbgrader:{p}" for p in ("formgrader", "create-assignment", "assignment-list",
                                                           "course-list", "menu")}
    overrides = json.loads((REPO / "scripts" / "lab" / "settings" / "overrides.json").read_text())
    viewers = overrides["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers["markdown"] == "Jupytext Notebook"
    # Validate reads the course's nbgrader configuration, whatever the server's working directory
    nbg = _load("learner", "nbgrader_config.py")
    course = _course_config()
    assert nbg.Execute.timeout == course.Execute.timeout and nbg.ClearSolutions.code_stub == course.ClearSolutions.code_stub


def test_the_file_browser_shows_the_course_not_build_or_instructor_folders(tmp_path):
    """The root of `make lab`'s file browser (learner): the course's folders, not _build/, *.egg-info/, artifacts/
    or solutions/; the instructor's Lab lists solutions/."""
    import asyncio
    import sys
    sys.path.insert(0, str(REPO / "scripts" / "lab"))
    import course_lab
    for name in ("book", "notebooks", "tfmlib", "solutions", "_build", "tfmlib.egg-info", "artifacts"):
        (tmp_path / name).mkdir()
    for mode, shown in (("learner", {"book", "notebooks", "tfmlib"}), ("instructor", {"book", "notebooks", "tfmlib", "solutions"})):
        cfg = _load(mode, "jupyter_server_config.py")
        manager = course_lab.ChapterKeepingContentsManager(root_dir=str(tmp_path), config=cfg)
        listing = asyncio.run(manager.get("", content=True))
        assert {item["name"] for item in listing["content"]} == shown, (mode, listing["content"])


def test_instructor_mode_has_formgrader_on_this_course():
    cfg = _load("instructor", "jupyter_server_config.py")
    ext = cfg.ServerApp.jpserver_extensions
    assert ext.pop("nbgrader.server_extensions.validate_assignment") is False  # course_lab serves Validate
    assert all(ext.values()) and len(ext) == 5 and "course_lab" in ext
    assert "tfmgrader.formgrader_page" in ext       # Formgrader's page of the grader's flags
    nbg = _load("instructor", "nbgrader_config.py")
    assert nbg.CourseDirectory.root == str(REPO)
    assert nbg.CourseDirectory.source_directory == "solutions" and nbg.CourseDirectory.release_directory == "notebooks"
    makefile = (REPO / "Makefile").read_text()
    assert "scripts/lab/instructor" in makefile and "lab-instructor:" in makefile


def _course_config():
    from traitlets.config.loader import PyFileConfigLoader
    return PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()


def test_chapters_and_exercises_link_each_other():
    """A plain Markdown link works both in the book (MyST turns it into a page link) and in JupyterLab."""
    import nbformat
    for chapter in sorted((REPO / "book").glob("0*.md")):
        a = chapter.stem
        assert f"](../notebooks/{a}/{a}.ipynb)" in chapter.read_text(), f"{chapter.name} does not link to its exercise"
        for folder in ("solutions", "notebooks"):
            nb = nbformat.read(str(REPO / folder / a / f"{a}.ipynb"), as_version=4)
            assert f"](../../book/{a}.md)" in nb.cells[0].source, f"{folder}/{a} does not link to its chapter"
