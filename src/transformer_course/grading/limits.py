"""The grader's limits, defined once: ``transformer-course grade``, ``transformer-course check`` (which promises
to grade as the grader does) and the execution of each notebook (:mod:`.execute`) all take them from here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """How long a graded notebook may run and how much memory its kernel may take."""

    cell_timeout: float = 60.0  # CPU seconds per cell (nbval's --nbval-cell-timeout; nbval_patches.CellClock)
    notebook_timeout: float = 600.0  # seconds for the whole notebook, kernel start included
    memory_limit_mb: int = 4096  # address space of the kernel (RLIMIT_AS); 0: no limit
    cases_seed: int | None = None  # draw every check's cases from this seed (hidden cases); None: the public ones

    def __post_init__(self):
        for name in ("cell_timeout", "notebook_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"Limits({name}=...): expected a positive number of seconds, got {value!r}")
        if isinstance(self.memory_limit_mb, bool) or not isinstance(self.memory_limit_mb, int) \
                or self.memory_limit_mb < 0:
            raise ValueError(f"Limits(memory_limit_mb=...): expected a whole number of MiB >= 0 (0: no limit), "
                             f"got {self.memory_limit_mb!r}")
        if self.cases_seed is not None and (isinstance(self.cases_seed, bool) or not isinstance(self.cases_seed, int)):
            raise TypeError(f"Limits(cases_seed=...): expected an int or None, got {type(self.cases_seed).__name__}")
