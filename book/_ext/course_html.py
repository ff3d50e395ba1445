"""Small fixes to the HTML that Jupyter Book 1.x writes, applied while Sphinx renders each page.

Jupyter Book adds sphinx-thebe's configuration snippet twice, so every page declares
``const THEBE_JS_URL`` twice and the browser reports a SyntaxError; identical inline scripts are kept once.
"""


def _drop_duplicate_inline_scripts(app, pagename, templatename, context, doctree):
    seen, kept = set(), []
    for script in context.get("script_files", []):
        body = getattr(script, "attributes", {}).get("body") if hasattr(script, "attributes") else None
        if body and body in seen:
            continue
        if body:
            seen.add(body)
        kept.append(script)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", _drop_duplicate_inline_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
