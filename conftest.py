"""Repository-wide pytest configuration.

nbval names each notebook cell by its position ("Cell 7"), so inserting a cell renames every test after
it. Name them by the cell's id instead, which nbformat 4.5 keeps stable across edits.

nbval also gives up when the kernel's output messages pause for 5 s after a cell finishes; on a loaded
2-core machine (two pytest-xdist workers, grading subprocesses) that happened once after a long training
cell. Allow 60 s; a cell that really hangs is still stopped by --nbval-cell-timeout.

Kernels start over private ipc sockets, retried (transformer_course.grading.kernel_start): over TCP, a port
picked for a kernel can be taken by another process before the kernel binds it.
"""

from transformer_course.grading.kernel_start import start_kernel
from transformer_course.grading.nbval_patches import start_kernels_with

OUTPUT_TIMEOUT = 60
start_kernels_with(start_kernel)


def pytest_collection_modifyitems(items):
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None or not hasattr(item, "cell_num") or not cell.get("id"):
            continue
        item.output_timeout = max(getattr(item, "output_timeout", 0), OUTPUT_TIMEOUT)
        item.name = cell["id"]
        item._id = item.parent.id.child(item.name)  # pytest 9 derives nodeid from this structured id
