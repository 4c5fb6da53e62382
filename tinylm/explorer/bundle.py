"""The tinylm tab's frontend as one HTML page with nothing to fetch: a saved view (``standalone``).

The tab is ES modules under ``static/`` that import each other by relative URL, which a page opened from a
file or put in a notebook cell has no server to answer. ``page`` inlines them into one module script: each
module's code runs in a function of its own (its top-level names stay its own, as in a module), its
``export`` declarations become the object that function returns, and each ``import { a, b as c } from
"./x.js"`` becomes ``const { a, b: c } = <x's object>``; the modules come in the order of their imports, and
``styles.css`` is inlined as a ``<style>``. The page's data is JSON in a ``<script type="application/json">``,
its ``<``, ``>``, ``&`` and ``/`` escaped (``\\u003c``, ``\\/``): no ``</script>`` ends it early, and no
``https://`` of a text it holds reads as an address. A module in another form than these (a default export,
``import *``, a cycle) is a TinyLMError, so that a change to the frontend that the bundling would break is
seen at once (tests/test_standalone_views.py builds a page of every module).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from tinylm.errors import TinyLMError

STATIC = Path(__file__).resolve().parent / "static"
ENTRY = "page.js"  # the saved views' own module: renderSaved(data)
IMPORT = re.compile(r'^import\s*\{([^}]*)\}\s*from\s*"\./([\w-]+\.js)";[ \t]*$', re.MULTILINE)
EXPORT = re.compile(r"^export\s+(?:async\s+function\*?|function\*?|class|const|let)\s+([A-Za-z_$][\w$]*)",
                    re.MULTILINE)
ANY_IMPORT = re.compile(r"^\s*import\b|\bimport\s*\(", re.MULTILINE)
ANY_EXPORT = re.compile(r"^\s*export\b", re.MULTILINE)
ENDS_SCRIPT = re.compile(r"</script|<!--", re.IGNORECASE)


def modules() -> list[str]:
    """The frontend's modules, by file name."""
    return sorted(path.name for path in STATIC.glob("*.js"))


def variable(name: str) -> str:
    """The bundle's name of a module's exports: ``text_view.js`` -> ``tinylm_text_view``."""
    return "tinylm_" + re.sub(r"\W", "_", name.removesuffix(".js"))


def imported_names(names: str, module: str) -> str:
    """``a, b as c`` -> ``a, b: c`` (a destructuring pattern)."""
    parts = []
    for part in (p.strip() for p in names.split(",")):
        if not part:
            continue
        found = re.fullmatch(r"([A-Za-z_$][\w$]*)(?:\s+as\s+([A-Za-z_$][\w$]*))?", part)
        if not found:
            raise TinyLMError(f"static/{module}: cannot bundle the import of {part!r}: import names as "
                              '`import { a, b as c } from "./x.js"`')
        name, alias = found.groups()
        parts.append(f"{name}: {alias}" if alias else name)
    return ", ".join(parts)


def rewritten(name: str, source: str) -> tuple[str, list[str]]:
    """A module's code as the body of its function, and the modules it imports."""
    imports = [found.group(2) for found in IMPORT.finditer(source)]
    body = IMPORT.sub(lambda m: f"const {{ {imported_names(m.group(1), name)} }} = {variable(m.group(2))};", source)
    exports = EXPORT.findall(body)
    body = EXPORT.sub(lambda m: m.group(0).removeprefix("export").lstrip(), body)
    if ANY_IMPORT.search(body) or ANY_EXPORT.search(body):
        raise TinyLMError(f"static/{name}: an import or export the saved views cannot bundle: use "
                          '`import { a } from "./x.js"` and `export function|class|const a` only')
    if ENDS_SCRIPT.search(body):
        raise TinyLMError(f"static/{name} holds '</script' or '<!--', which would end its inline script")
    body = body.rstrip() + f"\nreturn {{ {', '.join(exports)} }};"
    return body, imports


def ordered(entry: str, sources: dict[str, str]) -> list[tuple[str, str]]:
    """``(name, body)`` of ``entry`` and every module it imports, each after the modules it imports."""
    done: dict[str, str] = {}
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in visiting:
            raise TinyLMError(f"static/: the modules import each other in a circle ({' -> '.join([*visiting, name])})")
        if name not in sources:
            raise TinyLMError(f"static/{visiting[-1]} imports ./{name}, which is not in tinylm/explorer/static")
        visiting.append(name)
        body, imports = rewritten(name, sources[name])
        for imported in imports:
            visit(imported)
        visiting.pop()
        done[name] = body

    visit(entry)
    return list(done.items())


def script(call: str) -> str:
    """Every module the entry reaches (the tab's own index.js, and all it imports, among them), then ``call``."""
    sources = {name: (STATIC / name).read_text(encoding="utf-8") for name in modules()}
    parts = [f"// tinylm/explorer/static/{name}\nconst {variable(name)} = (() => {{\n{body}\n}})();"
             for name, body in ordered(ENTRY, sources)]
    return "\n\n".join([*parts, call]) + "\n"


def script_json(data) -> str:
    """``data`` as JSON that can sit inside a ``<script>`` and names no address (see the module's docstring)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for character, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("/", "\\/"),
                              ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(character, escape)
    return text


def page(data: dict, title: str) -> str:
    """One HTML document: the styles, ``data`` and the frontend, which shows ``data`` once the page has loaded."""
    styles = (STATIC / "styles.css").read_text(encoding="utf-8")
    if ENDS_SCRIPT.search(styles) or "</style" in styles.lower():
        raise TinyLMError("static/styles.css holds '</style', which would end its inline style")
    call = (f"{variable(ENTRY)}.renderSaved(JSON.parse("
            "document.getElementById('tinylm-data').textContent));")
    return "\n".join([
        "<!doctype html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>",
        f"<style>\n{styles}</style>",
        f'<script type="application/json" id="tinylm-data">{script_json(data)}</script>',
        f'<script type="module">\n{script(call)}</script>',
        "</head>",
        "<body></body>",
        "</html>",
        "",
    ])
