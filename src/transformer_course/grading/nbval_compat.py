"""What the course replaces inside nbval, checked before anything is replaced.

nbval has no public hooks for three things the course needs: starting the kernel (``kernel_start``
replaces ``nbval.kernel.start_new_kernel``, which sends the kernel's stderr to /dev/null and starts it over
TCP), and, in the grader's plugin, the id of each execute request and the reply to it
(``RunningKernel.execute_cell_input`` and ``await_reply``) and the kernel's pid (``IPyNbFile.setup``).
These are internals, so ``pyproject.toml`` pins nbval to the range below, and :func:`require` fails with
a message naming what is missing when an installed nbval no longer has one of them.

Imports nothing from the course package (the grader's plugin loads it by path, without torch).
"""

from __future__ import annotations

import inspect

SUPPORTED = ">=0.11,<0.12"  # the same range as pyproject.toml's dependency (a test keeps them equal)

# (module, attribute path, parameters it must accept): what the replacements call or stand in for.
NEEDED = [
    ("nbval.kernel", "start_new_kernel", ("startup_timeout", "kernel_name")),
    ("nbval.kernel", "KernelManager", ()),
    ("nbval.kernel", "NbvalKernelspecManager", ()),
    ("nbval.kernel", "RunningKernel.execute_cell_input", ("cell_input", "allow_stdin")),
    ("nbval.kernel", "RunningKernel.await_reply", ("msg_id", "timeout")),
    ("nbval.kernel", "RunningKernel.get_message", ("stream", "timeout")),
    ("nbval.kernel", "RunningKernel.is_alive", ()),
    ("nbval.plugin", "IPyNbFile.setup", ()),
]


class NbvalChanged(RuntimeError):
    """The installed nbval lacks something the course replaces."""


def require(modules: dict | None = None) -> None:
    """Raise :class:`NbvalChanged` unless every entry of :data:`NEEDED` exists with its parameters.

    ``modules`` maps module names to modules (for tests); by default they are imported.
    """
    import importlib

    problems = []
    for module_name, path, parameters in NEEDED:
        try:
            target = modules[module_name] if modules is not None else importlib.import_module(module_name)
            for part in path.split("."):
                target = getattr(target, part)
        except (AttributeError, KeyError, ImportError):
            problems.append(f"{module_name}.{path} is missing")
            continue
        if parameters:
            accepted = inspect.signature(target).parameters
            absent = [p for p in parameters if p not in accepted]
            if absent:
                problems.append(f"{module_name}.{path} no longer takes {', '.join(absent)}")
    if problems:
        version = _version()
        raise NbvalChanged(f"nbval {version} is not the nbval the course was written for ({SUPPORTED}): "
                           + "; ".join(problems) + f". Install a supported one: pip install 'nbval{SUPPORTED}'")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nbval")
    except PackageNotFoundError:
        return "(not installed)"
