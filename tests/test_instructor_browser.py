"""Nothing a student wrote runs as script in a page the instructor or a student opens.

The browser test: a small course (05_positional_encoding) with one submission carrying a
payload of every class (markup in markdown, outputs of every MIME type: text/html,
application/javascript, image/svg+xml with script, text/markdown, a widget view, metadata that
templates render) and a submission whose student id is HTML, refused at collect (and, copied into
submitted/ by hand, an error row never written into the gradebook). It is collected, graded by
``course autograde``, given feedback; then one Jupyter server with the Formgrader and the
course's instructor_server extension serves the students list, the submissions lists, the
manual grading view, the student's assignments page and the .html and .svg files the student
shipped beside the notebook (served as they are: the policy stops them) to headless Chromium,
and the feedback HTML is opened too. Each payload, if it ran, would record itself in ``window.__pwned``, set the
page's title and write a file into the course root through the server's contents API: none
does, no Content-Security-Policy violation is reported (the Formgrader's own scripts all run,
nothing of the page needs to be blocked), and the pages still show the student's math (MathJax
rendered), a plot and text outputs. A control page proves the payloads live: the same notebook
rendered by plain nbconvert runs them. Screenshots go to the test's tmp folder.

Then, on the same course and server, the instructor grades the submission's written answers
(nbgrader's manually graded answer cells) in the Formgrader: it lists the submission as
needing manual grading, the scores and a comment typed into the page reach the gradebook, the
total and ``course export`` include them, and the regenerated feedback shows the comment.

The rest runs in-process, without a browser: the sanitizer on each payload class and on the
course's own markdown, the Formgrader's exporter as nbgrader_config.py sets it, the template
nonces, student ids, the exchange collect.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

from course_grading import untrusted
from course_grading.instructor_server import handler_hashes, nonce_scripts
from course_grading.preprocessors import SanitizeNotebook
from course_grading.preprocessors.limited_execute import HIDDEN_MIME
from course_grading.preprocessors.sanitize import render_markdown
from jupyter_browser import (
    CHROMIUM,
    FLAGS,
    ROOT,
    filled_in,
    free_port,
    jupyter_server,
    require_browser,
    write_instructor_config,
)

A = "05_positional_encoding"
BIN = Path(sys.executable).parent
# a system user of every Linux: collect takes the student from the submission's owner
STUDENT = "daemon"
HTML_ID = "<img src=x onerror=window.__pwned=1>"


def payload(tag: str) -> str:
    """JavaScript that, if it runs, records ``tag``, sets the title and writes PWNED-<tag>.txt
    into the server's root (no double quote: it goes into HTML attributes)."""
    return (
        "(window.__pwned=window.__pwned||[]).push('"
        + tag
        + "');document.title='PWNED "
        + tag
        + "';fetch('/api/contents/PWNED-"
        + tag
        + ".txt',{method:'PUT',headers:{'Content-Type':"
        "'application/json','X-XSRFToken':(document.cookie.match(/_xsrf=([^;]*)/)||[])[1]},"
        "body:JSON.stringify({type:'file',format:'text',content:'x'})})"
    )


def img(tag: str) -> str:
    return f'<img src=x onerror="{payload(tag)}">'


MATH = r"The student's own formula: $\sqrt{d_k} < \frac{QK^\top}{2}$ and $a_{ij} \ne 0$."
# TeX that MathJax turns into markup: an overlay over the whole page (\style), a javascript:
# link (\href), an element id and class of the Formgrader's own page (\cssId, \class).
# Its Safe extension, which the Formgrader's MathJax loads, must keep the text and drop the rest.
MATH_MARKUP = (
    r"$\style{position:fixed;top:0;left:0;width:100%;height:100%;background:red}"
    r"{\text{mjoverlay}}$ $\href{javascript:window.__pwned=['mjhref']}{\text{mjlink}}$ "
    r"$\cssId{notebook-container}{\text{mjid}}$ $\class{btn}{\text{mjclass}}$"
)
MATH_MARKUP_SAFE = """() => { const box = document.querySelector('#notebook-container');
  const inside = [...box.querySelectorAll('.MathJax_Preview *, .MathJax *, mjx-container *')];
  const typeset = inside.map(e => e.textContent).join(' ');
  return {shown: ['mjoverlay', 'mjlink', 'mjid', 'mjclass'].filter(t => typeset.includes(t)).length,
          errors: box.querySelectorAll('.merror, .MathJax_Error, mjx-merror, [data-mjx-error]').length,
          fixed: inside.filter(e => getComputedStyle(e).position === 'fixed').length,
          links: [...box.querySelectorAll('a[href]')].filter(a => /^\\s*javascript:/i.test(a.getAttribute('href'))).length,
          ids: inside.filter(e => e.id === 'notebook-container').length,
          classes: inside.filter(e => e.classList.contains('btn')).length}; }"""
TEXT = "hello from the student's notebook"
SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10" onload="'
    + payload("svg")
    + '"><script>'
    + payload("svgscript")
    + "</script></svg>"
)
# what the student's cells do when they run (the outputs come from the kernel)
PAYLOAD_CODE = textwrap.dedent(f"""\
    from IPython.display import HTML, SVG, Javascript, Markdown, display
    print({TEXT!r})
    display(HTML({img("html") + "<script>" + payload("htmlscript") + "</script><b>bold html</b>"!r}))
    display(Javascript({payload("js")!r}))
    display({{"image/svg+xml": {SVG!r}, "text/plain": "an svg"}}, raw=True)
    display(Markdown({img("mdout") + " markdown output $x^2$"!r}))
    display({{"text/html": {'<iframe srcdoc="<script>parent.' + payload("iframe") + '</script>"></iframe>'!r},
             "text/vnd.mermaid": "graph TD; A-->B", "text/plain": "mixed"}}, raw=True)
    """)
WIDGET_CODE = textwrap.dedent(f"""\
    import ipywidgets as W
    display(W.HTML({img("widget")!r}))
    """)
PLOT_CODE = textwrap.dedent("""\
    %matplotlib inline
    import matplotlib.pyplot as plt
    plt.figure(figsize=(3, 2))
    plt.plot([0, 1, 2], [2, 0, 1])
    plt.title("student plot")
    plt.show()
    """)
MARKDOWN = (
    f'## My notes\n\n{MATH}\n\n{MATH_MARKUP}\n\n{img("md")} <svg onload="{payload("mdsvg")}"></svg>\n\n'
    f"<script>{payload('mdscript')}</script>\n\n[a link](javascript:{payload('mdlink')})\n"
)
CONTROL_TAGS = {"md", "html", "htmlscript", "js", "mdout"}  # what plain nbconvert runs


def payload_cells() -> list:
    """The cells a hostile student appends to the notebook."""
    markdown = new_markdown_cell(MARKDOWN)
    tagged = new_code_cell(PAYLOAD_CODE)
    tagged.metadata["tags"] = ['"><img src=x onerror="window.__pwned=[\'tag\']">']  # no comma in a tag
    return [markdown, tagged, new_code_cell(WIDGET_CODE), new_code_cell(PLOT_CODE)]


def hostile_notebook(dest: Path, name: str = A) -> Path:
    path = filled_in(A, dest, name=name)
    nb = nbformat.read(path, as_version=4)
    written = [
        c for c in nb.cells if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("grade")
    ]
    written[
        -1
    ].source += f"\n\n{img('written')} <script>{payload('writtenscript')}</script>"  # graded by hand
    nb.cells += payload_cells()
    nb.metadata["title"] = "</title><script>" + payload("title") + "</script>"
    nbformat.write(nb, path)
    return path


def with_outputs(nb):
    """``nb`` with the outputs its payload cells produce when run (as a kernel would write
    them), and widget state in its metadata."""
    markdown, tagged, widget, plot = nb.cells[-4:]
    tagged.outputs = [
        new_output("stream", name="stdout", text=TEXT + "\n"),
        new_output(
            "display_data",
            data={
                "text/html": img("html") + "<script>" + payload("htmlscript") + "</script><b>bold html</b>",
                "text/plain": "<HTML>",
            },
        ),
        new_output("display_data", data={"application/javascript": payload("js"), "text/plain": "<JS>"}),
        new_output("display_data", data={"image/svg+xml": SVG, "text/plain": "an svg"}),
        new_output(
            "display_data",
            data={"text/markdown": img("mdout") + " markdown output $x^2$", "text/plain": "<Markdown>"},
        ),
        new_output(
            "execute_result",
            data={"text/plain": "1"},
            execution_count=1,
            metadata={"filenames": {"image/png": 'x" onerror="' + payload("fname")}},
        ),
        new_output("display_data", data={HIDDEN_MIME: {"hidden_tests": True}}),
    ]
    widget.outputs = [
        new_output(
            "display_data",
            data={
                "application/vnd.jupyter.widget-view+json": {
                    "model_id": "m1",
                    "version_major": 2,
                    "version_minor": 0,
                },
                "text/plain": "HTML(value='...')",
            },
        )
    ]
    nb.metadata["widgets"] = {
        "application/vnd.jupyter.widget-state+json": {
            "state": {
                "m1": {
                    "model_name": "HTMLModel",
                    "model_module": "@jupyter-widgets/controls",
                    "model_module_version": "2.0.0",
                    "state": {"value": img("widgetstate")},
                }
            },
            "version_major": 2,
            "version_minor": 0,
        }
    }
    return nb


# ------------------------------------------------------------------ in-process, no browser


def test_course_markdown_is_kept_as_written():
    """Every markdown cell of the course renders to HTML that bleach leaves as it is: the
    sanitizer keeps them all, word for word (math, code, tables)."""
    sanitizer = SanitizeNotebook()
    cells = [
        c
        for path in sorted((ROOT / "solutions").glob("*/*.ipynb"))
        for c in nbformat.read(path, as_version=4).cells
        if c.cell_type == "markdown"
    ]
    assert len(cells) > 100
    changed = [c.source[:60] for c in cells if sanitizer.sanitize_markdown(c.source) != c.source]
    assert not changed


def test_every_payload_class_is_made_inert(tmp_path):
    nb = with_outputs(nbformat.read(hostile_notebook(tmp_path), as_version=4))
    nb.cells.append(
        new_code_cell(
            "x = 1",
            metadata={
                "nbgrader": {
                    "grade_id": '"><img src=x onerror=alert(1)>',
                    "solution": True,
                    "grade": False,
                    "locked": False,
                    "schema_version": 3,
                }
            },
        )
    )
    nb.cells.append(
        new_markdown_cell(
            "![a](attachment:a.svg)",
            attachments={"a.svg": {"image/svg+xml": "PHN2Zz48L3N2Zz4=", "image/png": "iVBORw0KGgo="}},
        )
    )
    nb, _ = SanitizeNotebook().preprocess(nb, {})

    assert "widgets" not in nb.metadata
    markdown, tagged, widget, plot, graded, attached = nb.cells[-6:]
    assert "nbgrader" not in graded.metadata
    assert list(attached.attachments["a.svg"]) == ["image/png"]
    html = render_markdown(markdown.source)
    assert not active_markup(html) and "<script" not in html
    assert "&lt;script&gt;" in html  # shown as text, not run
    assert r"$\sqrt{d_k} &lt; \frac{QK^\top}{2}$" in html  # the math, as MathJax reads it
    assert [o.output_type for o in tagged.outputs] == [
        "stream",
        "display_data",
        "display_data",
        "display_data",
        "display_data",
        "execute_result",
        "display_data",
    ]
    stream, html_out, js_out, svg_out, md_out, result, marker = tagged.outputs
    assert stream.text == TEXT + "\n"
    assert set(html_out.data) == {"text/html", "text/plain"}
    assert not active_markup(html_out.data["text/html"]) and "<b>bold html</b>" in html_out.data["text/html"]
    assert "<script" not in html_out.data["text/html"]
    assert set(js_out.data) == {"text/plain"} and set(svg_out.data) == {"text/plain"}
    assert not active_markup(render_markdown(md_out.data["text/markdown"]))
    assert "filenames" not in result.metadata
    assert marker.data == {HIDDEN_MIME: {"hidden_tests": True}}  # feedback still finds it
    assert widget.outputs and set(widget.outputs[0].data) == {"text/plain"}
    # sanitizing twice changes nothing more
    again, _ = SanitizeNotebook().preprocess(nbformat.from_dict(json.loads(json.dumps(nb))), {})
    assert again == nb


def test_markdown_that_nbconvert_cannot_render_is_shown_as_text():
    out = SanitizeNotebook().sanitize_markdown("![i](attachment:missing.png) <img src=x onerror=alert(1)>")
    assert "<img" not in out and "&lt;img" in out


def test_markdown_rendered_per_notebook_is_bounded():
    """Past max_rendered_chars of a notebook's markdown, cells are shown as their escaped text
    (nbconvert's renderer is too slow to run on whatever length a submission holds); the
    course's own cells, judged before, are kept as written."""
    course_cell = "A *course* cell with $x^2$."
    SanitizeNotebook().sanitize_markdown(course_cell)  # judged once, as the release's cells are
    hostile = "*a* <img src=x onerror=alert(1)> " * 3000  # about 100,000 characters
    nb = nbformat.v4.new_notebook(
        cells=[new_markdown_cell(course_cell)] + [new_markdown_cell(f"{i} {hostile}") for i in range(3)]
    )
    start = time.perf_counter()
    out, _ = SanitizeNotebook(max_rendered_chars=150_000).preprocess(nb, {})
    assert time.perf_counter() - start < 60  # a bound that only a blow-up breaks
    assert out.cells[0].source == course_cell
    first, *rest = (c.source for c in out.cells[1:])
    assert "<em>" in first and "onerror" not in first  # rendered, then cleaned
    for source in rest:  # over the budget: text, escaped, never markup
        assert source.startswith('<div class="course-sanitized"><pre>') and "<img" not in source
        assert "&lt;img src=x onerror=alert(1)&gt;" in source


def test_formgrader_exporter_sanitizes_an_unsanitized_notebook(tmp_path):
    """Defence in depth: the Formgrader's exporter (its formgrade template, which puts
    markdown into the page uncleaned), configured by nbgrader_config.py, renders a notebook
    that was never sanitized without any of its payloads; so does the feedback exporter."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers

    from course_grading.course.course import Course

    nb = with_outputs(nbformat.read(hostile_notebook(tmp_path), as_version=4))
    config = Course(ROOT).config_copy()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {
        "base_url": "",
        "assignment_id": A,
        "notebook_id": A,
        "submission_id": "s",
        "index": 0,
        "total": 1,
        "student": STUDENT,
        "notebook_path": "x",
    }
    html, _ = HTMLExporter(config=config).from_notebook_node(nb, resources=resources)
    assert not active_markup(html, within="#notebook-container")  # (the nav is nbgrader's)
    assert "widget-state" not in html and "widget-view" not in html
    assert TEXT in html and "&lt;script&gt;" in html  # the student's markup, as text


def active_markup(html: str, within: str | None = None) -> list[str]:
    """What in ``html`` (in its element ``within``, a CSS selector) could run a payload: an
    element with an on* attribute, a script holding one, a frame, an object, a javascript: or
    data: link."""
    from bs4 import BeautifulSoup

    found, soup = [], BeautifulSoup(html, "html.parser")
    if within:
        soup = soup.select_one(within)
        assert soup is not None, within
    for element in soup.find_all(True):
        found += [f"{element.name} {k}" for k in element.attrs if k.lower().startswith("on")]
        if element.name == "script" and "__pwned" in element.get_text() and _runs(element):
            found.append("script " + element.get_text()[:40])
        if element.name in ("iframe", "frame", "object", "embed", "base"):
            found.append(element.name)
        for key in ("href", "src", "action", "formaction", "xlink:href"):
            if str(element.get(key, "")).strip().lower().startswith(("javascript:", "data:text")):
                found.append(f"{element.name} {key}")
    return found


# What a browser runs: a script without a type, or with a JavaScript one. MathJax keeps each
# formula's TeX in a script of type math/tex, which no browser runs.
JS_TYPES = (
    "",
    "text/javascript",
    "application/javascript",
    "application/ecmascript",
    "text/ecmascript",
    "module",
    "text/jscript",
    "application/x-javascript",
)


def _runs(script) -> bool:
    return str(script.get("type", "")).split(";")[0].strip().lower() in JS_TYPES


def test_student_ids_are_plain_names():
    for good in ("ada", "ben.smith", "s_01-x", "a@b.edu", "A" * 64):
        assert untrusted.plain_name(good), good
    for bad in (
        "",
        ".",
        "..",
        ".hidden",
        "-rf",
        "a/b",
        "a\0b",
        "<img src=x>",
        'a"b',
        "a b",
        "ad\u00e9",
        "a\udcff",
        "A" * 65,
        "x'y",
        "a&b",
        "a\nb",
    ):
        assert not untrusted.plain_name(bad), bad


def test_template_scripts_get_a_nonce_only_when_fixed():
    import jinja2

    env = jinja2.Environment()
    env.globals["csp_nonce"] = lambda: "N"
    source = (
        '<script>var a = "{{ x }}"; var b = "{{ x }}/formgrader";</script>'
        '<script>var c = {{ x }};</script><script src="{{ x }}/y.js"></script>'
        '<script type="application/json">{{ x }}</script>'
    )
    out = env.from_string(nonce_scripts(source)).render(x='"</script><script>alert(1)//')
    first, second, third, data = out.split("</script>")[:4]
    assert first.startswith('<script nonce="N">') and "<script>alert" not in first
    assert "\\u003c/script\\u003e" in first and '\\"' in first
    assert "nonce" not in second and "nonce" not in third and "nonce" not in data
    # the nbgrader templates' own inline handlers are known by hash
    from nbgrader.server_extensions.formgrader import handlers

    assert len(handler_hashes(Path(handlers.template_path))) >= 3


def test_every_notebook_pipeline_ends_sanitized():
    """``course autograde``, plain ``nbgrader autograde`` and feedback (nbgrader_config.py)
    and every HTMLExporter run SanitizeNotebook, switched on; ``course autograde`` even when
    the configuration leaves it out."""
    from traitlets.config import Config
    from traitlets.utils.importstring import import_item

    from course_grading.course.course import Course
    from course_grading.course.nbgrader_setup import course_directory, sanitized_last
    from course_grading.preprocessors import GraderRubric
    from course_grading.reports.feedback import feedback_preprocessors

    def classes(steps):
        return [import_item(s) if isinstance(s, str) else s for s in steps]

    config = Course(ROOT).config
    assert classes(config.Autograde.autograde_preprocessors)[-1] is SanitizeNotebook
    assert classes(course_directory(ROOT).config.Autograde.autograde_preprocessors)[-1] is SanitizeNotebook
    assert SanitizeNotebook in classes(feedback_preprocessors(config.GenerateFeedback.preprocessors))
    assert SanitizeNotebook in classes(feedback_preprocessors([]))
    assert classes(config.HTMLExporter.preprocessors) == [GraderRubric, SanitizeNotebook]
    assert classes(sanitized_last(["nbgrader.preprocessors.SaveAutoGrades"]))[-1] is SanitizeNotebook
    assert SanitizeNotebook(config=Config()).enabled  # nbgrader registers its steps as they are


def _course(top: Path, exchange: Path | None = None) -> Path:
    course = top / "course"
    for part in ("solutions", "notebooks"):
        shutil.copytree(
            ROOT / part / A,
            course / part / A,
            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"),
        )
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    if exchange:
        with (course / "nbgrader_config.py").open("a", encoding="utf-8") as config:
            config.write(f"\nc.Exchange.root = {str(exchange)!r}\n")
    return course


# files a student ships beside the notebook: the Formgrader serves them from the submission
SIDE_FILES = {
    "notes.html": f"<h1>notes</h1><script>{payload('sidehtml')}</script>{img('sideimg')}",
    "picture.svg": SVG.replace("'svg'", "'sidesvg'").replace("'svgscript'", "'sidesvgscript'"),
}


def _inbound(exchange: Path, student: str, notebook: Path, files: dict | None = None) -> None:
    stamp = "2026-01-01 10:00:00.000000 UTC"
    folder = exchange / "attention-course" / "inbound" / f"{student}+{A}+{stamp}+0123456789"
    folder.mkdir(parents=True)
    shutil.copy(notebook, folder / f"{A}.ipynb")
    (folder / "timestamp.txt").write_text(stamp)
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    try:  # submitted by that user (collect takes the student from the owner)
        user = pwd.getpwnam(student)
    except KeyError:
        return  # an id no user has: collect refuses it whoever owns it
    for path in (folder, *folder.rglob("*")):
        os.chown(path, user.pw_uid, user.pw_gid)


def _collect(course: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [str(BIN / "nbgrader"), "collect", A],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_collect_refuses_an_html_student_id(tmp_path):
    exchange = tmp_path / "exchange"
    course = _course(tmp_path, exchange)
    notebook = filled_in(A, tmp_path)
    (exchange / "attention-course" / "inbound").mkdir(parents=True)
    _inbound(exchange, STUDENT, notebook)
    _inbound(exchange, HTML_ID, notebook)
    done = _collect(course)
    assert done.returncode == 1, done.stderr
    assert "refused, nothing of it collected" in done.stderr and "not a plain student id" in done.stderr
    assert sorted(p.name for p in (course / "submitted").iterdir()) == [STUDENT]
    assert (course / "submitted" / STUDENT / A / f"{A}.ipynb").is_file()


# ------------------------------------------------------------------ the browser

NO_PWN = "() => ({pwned: window.__pwned || null, title: document.title, csp: window.__csp || []})"
RECORD_CSP = (
    "window.__csp = []; document.addEventListener('securitypolicyviolation', "
    "e => window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || 'inline') + ' '"
    " + (e.sample || '')));"
)
MATHJAX_DONE = "() => document.querySelectorAll('.MathJax, .MathJax_Display, mjx-container').length"
PLOT_SHOWN = (
    "() => [...document.querySelectorAll('img')].filter(i => i.src.startsWith('data:image/png')"
    " && i.naturalWidth > 100).length"
)


def _clean(page, what: str, blocked: bool = False) -> dict:
    """No payload ran in ``page``; the Content-Security-Policy blocked something there only
    where ``blocked`` says it had to (else the page itself or a payload met it)."""
    page.wait_for_timeout(1500)  # an onerror, a script, a fetch would have happened by now
    state = page.evaluate(NO_PWN)
    assert state["pwned"] is None, f"{what}: a payload ran: {state}"
    assert "PWNED" not in state["title"], f"{what}: {state}"
    assert bool(state["csp"]) == blocked, f"{what}: the Content-Security-Policy blocked: {state['csp']}"
    return state


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The course: collected (one HTML id refused), autograded, given feedback."""
    from course_grading.sandbox import bubblewrap

    top = tmp_path_factory.mktemp("instructor")
    exchange = top / "exchange"
    course = _course(top, exchange)
    (exchange / "attention-course" / "inbound").mkdir(parents=True)
    work = top / "work"
    work.mkdir()
    _inbound(exchange, STUDENT, hostile_notebook(work), SIDE_FILES)
    _inbound(exchange, HTML_ID, hostile_notebook(work, name="other"))
    collected = _collect(course)
    assert collected.returncode == 1 and "refused, nothing of it collected" in collected.stderr
    # an id that came by hand: an error row, never written into the gradebook
    by_hand = course / "submitted" / HTML_ID / A
    by_hand.mkdir(parents=True)
    shutil.copy(course / "submitted" / STUDENT / A / f"{A}.ipynb", by_hand)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    }
    sandbox = [] if bubblewrap.available()[0] else ["--no-sandbox"]
    graded = subprocess.run(
        [str(BIN / "course"), "--root", str(course), "autograde", A, "--jobs", "1", *sandbox],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert graded.returncode == 1, graded.stdout + graded.stderr  # the error row
    assert "not graded" in graded.stdout + graded.stderr
    shutil.rmtree(course / "submitted" / HTML_ID)
    fed = subprocess.run(
        [str(BIN / "course"), "--root", str(course), "feedback", A],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert fed.returncode == 0, fed.stdout + fed.stderr
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "attention-course") as gb:
        assert [s.id for s in gb.students] == [STUDENT]
        submission_id = gb.find_submission_notebook(A, A, STUDENT).id
    return course, submission_id, top


@pytest.mark.slow
def test_autograded_notebook_is_inert(graded):
    """What autograded/ holds is already sanitized (before any exporter sees it): the plot,
    the text and the math are kept."""
    course, _, _ = graded
    nb = nbformat.read(course / "autograded" / STUDENT / A / f"{A}.ipynb", as_version=4)
    assert "widgets" not in nb.metadata
    kinds = {key for cell in nb.cells for out in cell.get("outputs", []) for key in out.get("data", {})}
    assert kinds <= {
        "text/plain",
        "text/html",
        "text/markdown",
        "text/latex",
        "image/png",
        "image/jpeg",
        HIDDEN_MIME,
    }, kinds
    assert "image/png" in kinds
    html = [render_markdown(c.source) for c in nb.cells if c.cell_type == "markdown"]
    html += [
        str(out.data[k])
        for c in nb.cells
        for out in c.get("outputs", [])
        for k in ("text/html",)
        if k in out.get("data", {})
    ]
    html += [
        render_markdown(out.data["text/markdown"])
        for c in nb.cells
        for out in c.get("outputs", [])
        if "text/markdown" in out.get("data", {})
    ]
    assert not [found for h in html for found in active_markup(h)]
    assert any(r"$a_{ij} \ne 0$" in c.source for c in nb.cells if c.cell_type == "markdown")
    streams = [out.text for c in nb.cells for out in c.get("outputs", []) if out.output_type == "stream"]
    assert any(TEXT in t for t in streams)


@pytest.fixture(scope="module")
def formgrader(graded):
    """One Jupyter server, as the instructor runs it (docs/guides/jupyterhub.md, step 3)."""
    require_browser()
    course, _, top = graded
    config = top / "jupyter-config"
    write_instructor_config(config, course)
    port, token = free_port(), "instructor-test-token"
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    cmd = [
        sys.executable,
        "-m",
        "jupyter_server",
        "--no-browser",
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={course}",
        "--allow-root",
    ]
    with jupyter_server(cmd, top / "jupyter.log", token, port, cwd=course, env=env) as base:
        yield base, token


@pytest.mark.slow
@pytest.mark.browser
def test_no_student_payload_runs_in_any_page(graded, formgrader, tmp_path):
    from nbconvert.exporters import HTMLExporter
    from playwright.sync_api import sync_playwright

    course, submission_id, top = graded
    base, token = formgrader
    shots = tmp_path
    control = tmp_path / "control.html"  # the same notebook, plain nbconvert: the payloads run
    (tmp_path / "control-nb").mkdir()
    nb = with_outputs(nbformat.read(hostile_notebook(tmp_path / "control-nb"), as_version=4))
    control.write_text(HTMLExporter(template_name="lab").from_notebook_node(nb)[0])
    feedback_html = course / "feedback" / STUDENT / A / f"{A}.html"
    assert feedback_html.is_file()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(control.as_uri())
            page.wait_for_timeout(1500)
            ran = set(page.evaluate("() => window.__pwned || []"))
            assert CONTROL_TAGS <= ran, f"the payloads do not run even unsanitized: {ran}"
            page.close()

            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.add_init_script(RECORD_CSP)
            page = context.new_page()
            console = []  # shown when something fails
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.goto(f"{base}/formgrader?token={token}")  # logs in (cookie)

            page.goto(f"{base}/formgrader/manage_students")
            page.wait_for_selector("td:has-text('daemon')", timeout=30_000)
            assert page.evaluate("() => document.body.innerText").count("<img") == 0
            page.screenshot(path=str(shots / "students.png"), full_page=True)
            _clean(page, "students list")

            page.goto(f"{base}/formgrader/manage_students/{STUDENT}")
            page.wait_for_selector(f"td:has-text('{A}')", timeout=30_000)
            assert page.evaluate("() => student_id") == STUDENT  # its nonce'd script ran
            _clean(page, "the student's assignments")

            page.goto(f"{base}/formgrader/manage_submissions/{A}")
            page.wait_for_selector("td.student-id:has-text('daemon')", timeout=30_000)
            _clean(page, "submissions list")

            page.goto(f"{base}/formgrader/gradebook/{A}/{A}")
            page.wait_for_selector(f"a[href*='/formgrader/submissions/{submission_id}']", timeout=30_000)
            _clean(page, "the notebook's submissions")

            response = page.goto(f"{base}/formgrader/submissions/{submission_id}/")
            policy = response.headers.get("content-security-policy", "")
            assert "script-src 'nonce-" in policy and "unsafe-inline" not in policy, policy
            page.wait_for_selector("#notebook-container", timeout=30_000)
            page.wait_for_function(MATHJAX_DONE, timeout=60_000)
            assert not [m for m in console if "fontdata" in m or "Refused" in m], console
            assert page.evaluate("() => submission_id") == submission_id  # the Formgrader's script ran
            # the Formgrader's scripts loaded the grades: each test's score box shows its
            # autograde (a written answer, graded by hand, has none)
            page.wait_for_function(
                "() => document.querySelectorAll('input.score').length > 0 && "
                "[...document.querySelectorAll('input.score')]"
                ".every(i => i.placeholder !== '' || i.id.startsWith('written_'))",
                timeout=30_000,
            )
            body = page.evaluate("() => document.body.innerText")
            assert TEXT in body and "bold html" in body
            assert "<script>" in body  # the student's markup, shown as text
            assert page.evaluate(PLOT_SHOWN) >= 1, "no plot"
            assert page.evaluate(
                "() => [...document.querySelectorAll('.MathJax')]"
                ".some(e => e.closest('.rendered_html') && e.offsetParent)"
            )
            assert not active_markup(page.content(), within="#notebook-container")
            page.wait_for_function("() => !document.querySelector('.MathJax_Processing')", timeout=60_000)
            markup = page.evaluate(MATH_MARKUP_SAFE)  # TeX's own markup: the text only
            assert markup == {"shown": 4, "errors": 0, "fixed": 0, "links": 0, "ids": 0, "classes": 0}, markup
            page.screenshot(path=str(shots / "formgrader-submission.png"), full_page=True)
            _clean(page, "manual grading view")
            for name in SIDE_FILES:  # the student's own files, as the Formgrader serves them
                side = context.new_page()
                side.goto(f"{base}/formgrader/submissions/{submission_id}/{name}")
                assert side.evaluate("() => document.documentElement.outerHTML").count("__pwned") >= 1
                _clean(side, name, blocked=True)  # served as it is: the policy stops it
                side.close()
            # the second layer: markup that got into this page anyway runs no script
            page.evaluate(
                "() => document.body.insertAdjacentHTML('beforeend', "
                '\'<img src=x onerror="window.__probe = 1"><iframe srcdoc="<script>'
                "parent.__probe = 2</script>\"></iframe>')"
            )
            page.wait_for_timeout(1500)
            assert page.evaluate("() => window.__probe") is None
            assert any("script-src" in v for v in page.evaluate("() => window.__csp")), "no violation seen"
            context.close()

            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.add_init_script(RECORD_CSP)
            page.goto(feedback_html.as_uri())
            page.wait_for_selector("body", timeout=30_000)
            body = page.evaluate("() => document.body.innerText")
            assert TEXT in body and r"\sqrt{d_k}" in body  # MathJax comes from a CDN here
            assert not active_markup(page.content())
            # (feedback keeps the plain text of displays only, images too: HideHiddenOutputs)
            page.screenshot(path=str(shots / "feedback.png"), full_page=True)
            _clean(page, "feedback")
        finally:
            browser.close()
    written = sorted(p.name for p in course.rglob("PWNED*"))
    assert not written, f"a payload wrote into the course: {written}"
    print(f"screenshots in {shots}")


# ------------------------------------------------------------------ written answers, graded by hand

NEEDS_MANUAL = (
    "() => [...document.querySelectorAll('td.needs-manual-grade')]"
    ".filter(td => td.querySelector('.glyphicon-ok')).length"
)


def _written_answers(course: Path) -> dict[str, float]:
    """{grade_id: points} of the assignment's written answers (manually graded answer cells)."""
    nb = nbformat.read(course / "solutions" / A / f"{A}.ipynb", as_version=4)
    return {
        c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
        for c in nb.cells
        if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("grade")
    }


def _export(course: Path, tmp_path: Path) -> dict:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = tmp_path / f"export-{time.monotonic_ns()}.csv"
    done = subprocess.run(
        [str(BIN / "course"), "--root", str(course), "export", "--to", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    import csv

    [row] = [r for r in csv.DictReader(out.open()) if r["student_id"] == STUDENT]
    return row


@pytest.mark.slow
@pytest.mark.browser
def test_instructor_grades_a_written_answer_in_the_formgrader(graded, formgrader, tmp_path):
    """The Formgrader lists the submission as needing manual grading; the instructor scores
    the written answers and comments on one, in the page; the gradebook's total and ``course
    export`` include those points, and the student's feedback shows the comment."""
    from nbgrader.api import Gradebook
    from playwright.sync_api import sync_playwright

    from course_grading.sandbox import bubblewrap

    course, submission_id, _ = graded
    base, token = formgrader
    written = _written_answers(course)
    assert len(written) == 2
    (first, first_max), (second, second_max) = written.items()
    before = _export(course, tmp_path)
    assert before["note"] == f"needs manual grading ({first_max + second_max:g} points)"
    comment = "Good: you named permutation equivariance. **Next time** give the two sentences' vectors."

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.goto(f"{base}/formgrader?token={token}")
            page.goto(f"{base}/formgrader/gradebook/{A}/{A}")
            page.wait_for_selector(f"a[href*='/formgrader/submissions/{submission_id}']", timeout=30_000)
            page.wait_for_function(f"{NEEDS_MANUAL} === 1", timeout=30_000)
            page.screenshot(path=str(tmp_path / "needs-manual-grading.png"), full_page=True)

            page.goto(f"{base}/formgrader/submissions/{submission_id}/")
            page.wait_for_selector(f"input.score#{first}", timeout=30_000)
            # the grades have loaded once the autograded cells show their scores (a written
            # answer has none: its box stays empty)
            page.wait_for_function(
                "() => [...document.querySelectorAll('input.score')].some(i => i.placeholder !== '')",
                timeout=30_000,
            )
            page.wait_for_load_state("networkidle")  # the comments too: a late load would re-render
            # the model answer and rubric beside each written answer, for the grader
            shown = page.evaluate("() => document.body.innerText")
            assert shown.count("For the grader") == 2 and "Rubric (2 points)" in shown
            page.fill(f"input.score#{first}", "1.5")
            page.press(f"input.score#{first}", "Tab")  # a change saves it (the Formgrader's API)
            page.fill(f"textarea#{first}-comment", comment)
            page.press(f"textarea#{first}-comment", "Tab")
            page.fill(f"input.score#{second}", f"{second_max:g}")
            page.press(f"input.score#{second}", "Tab")
            with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "attention-course") as gb:
                deadline = time.monotonic() + 30
                while True:
                    gb.db.expire_all()
                    grades = {g: gb.find_grade(g, A, A, STUDENT) for g in written}
                    saved = gb.find_comment(first, A, A, STUDENT).manual_comment
                    if (grades[first].manual_score, grades[second].manual_score, saved) == (
                        1.5,
                        second_max,
                        comment,
                    ) or time.monotonic() > deadline:
                        break
                    time.sleep(0.3)
                assert (grades[first].manual_score, grades[second].manual_score, saved) == (
                    1.5,
                    second_max,
                    comment,
                )
                score = gb.find_submission(A, STUDENT).score
            page.screenshot(path=str(tmp_path / "manual-grading.png"), full_page=True)

            page.goto(f"{base}/formgrader/gradebook/{A}/{A}")
            page.wait_for_selector(f"a[href*='/formgrader/submissions/{submission_id}']", timeout=30_000)
            page.wait_for_timeout(1000)
            assert page.evaluate(NEEDS_MANUAL) == 0, "still listed as needing manual grading"
            # a regrade (a test fixed mid-term): the answers, unchanged, stay graded
            env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
            sandbox = [] if bubblewrap.available()[0] else ["--no-sandbox"]
            regraded = subprocess.run(
                [
                    str(BIN / "course"),
                    "--root",
                    str(course),
                    "autograde",
                    A,
                    "--student",
                    STUDENT,
                    "--jobs",
                    "1",
                    *sandbox,
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert regraded.returncode == 0, regraded.stdout + regraded.stderr
            page.reload()
            page.wait_for_selector(f"a[href*='/formgrader/submissions/{submission_id}']", timeout=30_000)
            page.wait_for_timeout(1000)
            assert page.evaluate(NEEDS_MANUAL) == 0, "a regrade put the graded answers back in the queue"
            context.close()

            after = _export(course, tmp_path)
            assert after["note"] == ""
            assert float(after["raw_score"]) == pytest.approx(float(before["raw_score"]) + 1.5 + second_max)
            assert float(after["raw_score"]) == pytest.approx(score)

            env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
            fed = subprocess.run(
                [str(BIN / "course"), "--root", str(course), "feedback", A],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert fed.returncode == 0, fed.stdout + fed.stderr
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto((course / "feedback" / STUDENT / A / f"{A}.html").as_uri())
            page.wait_for_selector("body", timeout=30_000)
            body = page.evaluate("() => document.body.innerText")
            assert (
                "Good: you named permutation equivariance. Next time give the two sentences' vectors." in body
            )
            assert "For the grader" not in body  # the grader's alone
            _clean(page, "feedback with comments")  # the answer's own markup ran nowhere
            assert page.evaluate(
                "() => [...document.querySelectorAll('strong')].some(e => e.textContent === 'Next time')"
            )  # the comment's markdown
            assert f"(Score: {float(score):g}" in body.replace(".0 /", " /") or f"{score:.1f}" in body
            page.screenshot(path=str(tmp_path / "feedback-comment.png"), full_page=True)
        finally:
            browser.close()
    print(f"screenshots in {tmp_path}")
