"""Small fixes to the HTML that Jupyter Book 1.x writes, applied while Sphinx renders each page, and the style of
the lessons' tables (``transformer_course.show.TABLE_CSS``, written as ``_static/course-tables.css``).

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


def _write_table_css(app, exception):
    if exception is None and app.builder.format == "html":
        from pathlib import Path

        from transformer_course.show import TABLE_CSS

        (Path(app.outdir) / "_static" / "course-tables.css").write_text(TABLE_CSS, encoding="utf-8")


def setup(app):
    app.connect("html-page-context", _drop_duplicate_inline_scripts)
    app.add_css_file("course-tables.css")
    app.connect("build-finished", _write_table_css)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
