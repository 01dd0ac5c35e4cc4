"""The instructor's Jupyter server: the Formgrader's pages run no script but their own.

A Jupyter server extension (``c.ServerApp.jpserver_extensions`` in the instructor's
``jupyter_server_config.py``, docs/guides/jupyterhub.md, step 3). Every page of nbgrader's
Formgrader (``<base_url>formgrader/...``) is served with a Content-Security-Policy that runs
only:

* the Formgrader's own script files and MathJax's (``formgrader/static/`` and
  ``static/jupyter_server_mathjax/`` of this server: no other path, no other host, so not a
  ``.js`` file of a submission served by ``/files/`` either);
* the inline scripts of nbgrader's own templates, which get a fresh nonce for every response.
  The nonce is written into the *template source* (``nonce_scripts``) when the template is
  compiled, before any notebook or student id is put into the page, so no content of the page
  can carry it. A template script gets it only if its body is fixed text or quoted values
  (``"{{ student_id }}"``), which are rewritten to be JSON-encoded (``tojson``: no quote, no
  ``</script>`` can end the string); any other template script keeps no nonce and does not run;
* the inline event handlers of nbgrader's templates (``onclick="toggle_name(true);"``), by
  their hashes ('unsafe-hashes'), computed from the installed templates.

No 'unsafe-inline', no 'unsafe-eval', ``object-src 'none'``, ``base-uri 'none'``. The policy is
added to the server's own (``ServerApp.tornado_settings`` headers, such as ``frame-ancestors``):
a browser enforces both. MathJax comes from this server (jupyter-server-mathjax) rather than a
CDN, and its configuration block becomes a nonce'd script (MathJax would otherwise ``eval`` it).

JupyterLab's own pages are left as they are: Lab renders a notebook's outputs with its own
sanitizer, and only runs script of a notebook the instructor trusts.
"""

from __future__ import annotations

import base64
import contextvars
import hashlib
import json
import re
import secrets
from pathlib import Path

from jinja2.ext import Extension
from tornado.web import OutputTransform

MATHJAX_PATH = "static/jupyter_server_mathjax/"
MATHJAX_QUERY = "MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
STIX = '"HTML-CSS": {availableFonts: [], webFont: "STIX-Web", imageFont: null},'
_NONCE: contextvars.ContextVar[str] = contextvars.ContextVar("course_csp_nonce", default="")

_SCRIPT = re.compile(r"<script(?P<attrs>(?:\s[^>]*)?)>(?P<body>.*?)</script>", re.S | re.I)
_QUOTED = re.compile(r"""(?P<q>["'])(?P<text>[^"'\\\n]*\{\{[^"'\\\n]*)(?P=q)""")
_VALUE = re.compile(r"\{\{(?P<expr>[^{}]*)\}\}")
_HANDLER = re.compile(r"""\son[a-z]+\s*=\s*(?P<q>["'])(?P<code>[^"'{}]*)(?P=q)""", re.I)


def csp_nonce() -> str:
    """The nonce of the response being rendered (a fresh unusable one outside a request)."""
    return _NONCE.get() or secrets.token_urlsafe(18)


def nonce_scripts(source: str, mathjax_config: bool = False) -> str:
    """``source`` (a Jinja template) with a nonce on each inline script that holds no template
    code but quoted values, those rewritten to JSON. With ``mathjax_config``, MathJax's
    configuration block becomes such a script."""

    def one(match: re.Match) -> str:
        attrs, body = match["attrs"], match["body"]
        if re.search(r"\ssrc\s*=", attrs, re.I) or "nonce" in attrs.lower():
            return match[0]
        kind = re.search(r"""\stype\s*=\s*["']?([^"'\s>]+)""", attrs, re.I)
        if kind and mathjax_config and kind[1].lower() == "text/x-mathjax-config":
            attrs = attrs[: kind.start()] + attrs[kind.end() :].lstrip("\"'")
        elif kind and kind[1].lower() not in ("text/javascript", "application/javascript", "module"):
            return match[0]  # a data block: not run, no nonce needed
        rest = _QUOTED.sub("", body)
        if "{{" in rest or "{%" in rest or "{#" in rest:
            return match[0]  # template code of another kind inside a script: it gets no nonce
        body = _QUOTED.sub(lambda m: _as_json(m["text"]), body)
        return f'<script nonce="{{{{ csp_nonce() }}}}"{attrs}>{body}</script>'

    return _SCRIPT.sub(one, source)


def _as_json(text: str) -> str:
    """A JavaScript string literal's text holding ``{{ expr }}`` values, as an expression that
    builds the same string from JSON-encoded parts."""
    parts, at = [], 0
    for match in _VALUE.finditer(text):
        if match.start() > at:
            parts.append(json.dumps(text[at : match.start()]))
        parts.append("{{ (" + match["expr"].strip() + ") | string | tojson }}")
        at = match.end()
    if at < len(text):
        parts.append(json.dumps(text[at:]))
    return "(" + " + ".join(parts) + ")"


def handler_hashes(folder: Path) -> list[str]:
    """CSP hashes of the fixed inline event handlers of the templates under ``folder``."""
    found = set()
    for path in sorted(folder.rglob("*")):
        if path.suffix in (".tpl", ".j2", ".html") and path.is_file():
            for match in _HANDLER.finditer(path.read_text(encoding="utf-8")):
                digest = hashlib.sha256(match["code"].encode()).digest()
                found.add("'sha256-" + base64.b64encode(digest).decode() + "'")
    return sorted(found)


class _Formgrader:
    """What the extension knows of the Formgrader: its templates and its URL."""

    template_path: Path | None = None
    hashes: list[str] = []
    installed = False


class NonceScripts(Extension):
    """Jinja extension: ``nonce_scripts`` on nbgrader's Formgrader templates (and on nbconvert's
    MathJax macro), ``csp_nonce`` as a global."""

    def __init__(self, environment):
        super().__init__(environment)
        environment.globals["csp_nonce"] = csp_nonce

    def preprocess(self, source, name, filename=None):
        where = Path(filename).resolve() if filename else None
        if where and _Formgrader.template_path and _Formgrader.template_path in where.parents:
            source = source.replace("{{ mathjax() }}", "{{ mathjax(resources.mathjax_url) }}")
            return nonce_scripts(source)
        if where and where.name == "mathjax.html.j2" and where.parent.name == "base":
            # jupyter-server-mathjax ships the STIX web fonts only (no-op for other outputs)
            source = source.replace("displayAlign: 'center',", "displayAlign: 'center', " + STIX)
            return nonce_scripts(source, mathjax_config=True)
        return source


def policy(nonce: str, origin: str, base_url: str) -> str:
    sources = [f"'nonce-{nonce}'"]
    if _Formgrader.hashes:
        sources += ["'unsafe-hashes'", *_Formgrader.hashes]
    sources += [f"{origin}{base_url}formgrader/static/", f"{origin}{base_url}{MATHJAX_PATH}"]
    return f"script-src {' '.join(sources)}; object-src 'none'; base-uri 'none'; form-action 'self'"


def _transform(serverapp):
    base_url = serverapp.web_app.settings["base_url"]
    prefix = base_url + "formgrader"

    class FormgraderPolicy(OutputTransform):
        """Content-Security-Policy, with a fresh nonce, on each response of the Formgrader
        (its pages, and the files of a submission it serves beside the notebook, where an
        .html or .svg file of the student's would otherwise run in the instructor's origin)."""

        def __init__(self, request):
            super().__init__(request)
            self.nonce = ""
            if request.path == prefix or request.path.startswith(prefix + "/"):
                if not _Formgrader.installed:  # the Formgrader loaded after this extension
                    _install(serverapp, last_chance=True)
                self.nonce = secrets.token_urlsafe(18)
                self.origin = f"{request.protocol}://{request.host}"
                # the handler runs in a task made from this context: its templates see it
                _NONCE.set(self.nonce)

        def transform_first_chunk(self, status_code, headers, chunk, finishing):
            if self.nonce:  # every response: a page, and a student's .html or .svg file beside
                headers.add("Content-Security-Policy", policy(self.nonce, self.origin, base_url))
            return status_code, headers, chunk

    return FormgraderPolicy


def _install(serverapp, last_chance: bool = False) -> None:
    """Once every extension is loaded (or, where the Formgrader is loaded later, as under
    JupyterHub's single-user server, before its first page is rendered): the nonces into the
    Formgrader's two template environments, MathJax from this server. Until then its pages
    run no script of their own either: the policy holds, the nonces are missing."""
    if _Formgrader.installed:
        return
    settings = serverapp.web_app.settings
    env, exporter = settings.get("nbgrader_jinja2_env"), settings.get("nbgrader_exporter")
    if env is None or exporter is None:
        if last_chance:
            serverapp.log.warning("course_grading.instructor_server: no Formgrader on this server")
        return
    _Formgrader.installed = True
    from nbgrader.server_extensions.formgrader import handlers

    _Formgrader.template_path = Path(handlers.template_path).resolve()
    _Formgrader.hashes = handler_hashes(_Formgrader.template_path)
    env.add_extension(NonceScripts)
    exporter.environment.add_extension(NonceScripts)
    if "jupyter_server_mathjax" in serverapp.extension_manager.extensions:
        exporter.mathjax_url = settings["base_url"] + MATHJAX_PATH + MATHJAX_QUERY
    serverapp.log.info("course_grading.instructor_server: Formgrader pages run their own scripts only")


def _jupyter_server_extension_points():
    return [{"module": "course_grading.instructor_server"}]


def _load_jupyter_server_extension(serverapp):
    serverapp.web_app.add_transform(_transform(serverapp))
    serverapp.io_loop.add_callback(_install, serverapp)
