"""Exercise checks: ``check("01.1", answer)`` prints a confirmation or raises :class:`CheckFailed`.

Each lesson's exercises live in their own module (``lesson01``, ``lesson02``, ...); importing this
package registers all of them in :data:`REGISTRY`, keyed by exercise id.
"""

from transformer_course.checks import (  # noqa: F401  (importing a lesson module registers its exercises)
    capstone,
    lesson01,
    lesson02,
    lesson03,
    lesson04,
    lesson05,
    lesson06,
    lesson07,
    lesson08,
    lesson09,
    lesson10,
    lesson11,
    lesson12,
    lesson13,
    shakespeare_model,
)
from transformer_course.checks.core import CheckFailed, check, install_ipython_handler
from transformer_course.checks.registry import REGISTRY, Exercise

__all__ = ["REGISTRY", "CheckFailed", "Exercise", "check"]

install_ipython_handler()
