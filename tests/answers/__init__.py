"""Known-wrong and correct answers to every exercise, one module per lesson (see tests/test_exercise_checks.py)."""

import functools


class Deferred:
    """An answer built the first time a test needs it, because building it takes time (a model trained for the
    capstone, or one that needs the capstone's tokenizers): test_exercise_checks calls ``build()`` (once per
    session) and marks the tests that use it slow unless ``slow=False``."""

    def __init__(self, build, *, slow: bool = True):
        self.build = functools.cache(build)
        self.slow = slow
