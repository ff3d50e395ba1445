"""Notebooks executed in place: ``transformer-course execute`` (``make execute``) and the notebook tests.

:func:`execute_notebook` re-runs a notebook top to bottom in a fresh kernel started with this very interpreter and
stores the outputs and widget state, with the install cell that lets it run in Colab (:mod:`.launch`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

from transformer_course.grading.kernel_start import use_private_ipc
from transformer_course.launch import install_cell_for, sync_install_cell


def current_env_kernel_manager():
    """A kernel manager that starts ipykernel with this very interpreter (the .venv), whatever
    kernelspecs the machine has installed elsewhere, over private ipc sockets."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    class CurrentEnv(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
            return KernelSpec(argv=argv, display_name="Python 3 (ipykernel)", language="python")

    km = KernelManager(kernel_name="python3", kernel_spec_manager=CurrentEnv())
    use_private_ipc(km)  # Unix sockets in a private folder: no TCP port another process can take first
    return km


def execute_notebook(path: str | Path, *, timeout: int = 600, allow_errors: bool = False) -> nbformat.NotebookNode:
    """Run ``path`` top to bottom in a fresh kernel (cwd = its folder) and return the executed notebook.

    A notebook inside the course book first gets the install cell of the book's repository
    (:mod:`transformer_course.launch`). Widget state is stored in the notebook's metadata so the book can
    render widgets.
    """
    path = Path(path)
    nb = read_for_execution(path)
    execute_cells(nb, path.parent.resolve(), timeout=timeout, allow_errors=allow_errors)
    return nb


def read_for_execution(path: Path) -> nbformat.NotebookNode:
    """``path`` as it is executed: with the install cell of its book's repository, when it is part of a book."""
    nb = nbformat.read(path, as_version=4)
    if (install := install_cell_for(path)) is not None:
        sync_install_cell(nb, install)
    return nb


def execute_cells(nb: nbformat.NotebookNode, folder: Path, *, timeout: int = 600, allow_errors: bool = False) -> None:
    """Run every cell of ``nb`` in order, in place, in a fresh kernel whose working folder is ``folder``; the
    kernel is stopped afterwards, whatever happened."""
    from nbclient import NotebookClient

    km = current_env_kernel_manager()
    client = NotebookClient(
        nb,
        km=km,
        timeout=timeout,
        allow_errors=allow_errors,
        store_widget_state=True,
        record_timing=False,
        resources={"metadata": {"path": str(folder)}},
    )
    try:
        client.execute()
    finally:  # NotebookClient leaves running a kernel whose manager it was handed
        if client.kc is not None:
            client.kc.stop_channels()
        km.shutdown_kernel(now=True)


def execute_in_place(path: str | Path, *, timeout: int = 600) -> None:
    """Execute ``path`` from a fresh kernel and write the outputs back to it."""
    nb = execute_notebook(path, timeout=timeout)
    nbformat.write(nb, path)
