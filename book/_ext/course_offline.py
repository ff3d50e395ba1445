"""The book reads without a network: MathJax, the one script the HTML would fetch from a CDN (Sphinx's default
``mathjax_path``), is served from the build output instead.

The files come from the PyPI package ``django-static-mathjax`` (MathJax 3's own ``es5`` build, nothing added),
pinned in requirements.txt: ``transformer_course.slides.copy_mathjax`` copies ``tex-mml-chtml.js`` and what it
loads at run time (TeX extensions, fonts, menu and accessibility modules) into ``_static/mathjax/``, and
``mathjax_path`` points there. The slide decks (``make slides``) use the same copy of MathJax.
"""

from pathlib import Path

MATHJAX_PATH = "mathjax/tex-mml-chtml.js"  # relative to _static/, as Sphinx reads a mathjax_path without a scheme


def _use_local_mathjax(app, config):
    if "://" in config.mathjax_path:  # the default CDN URL; a path the book sets itself is kept
        config.mathjax_path = MATHJAX_PATH


def _copy_mathjax(app, exception):
    if exception is None and app.builder.format == "html" and app.config.mathjax_path == MATHJAX_PATH:
        from transformer_course.slides import copy_mathjax

        copy_mathjax(Path(app.outdir) / "_static" / "mathjax")


def setup(app):
    app.connect("config-inited", _use_local_mathjax, priority=900)  # after the extensions that set math options
    app.connect("build-finished", _copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
