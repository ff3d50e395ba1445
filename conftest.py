"""Repository-wide pytest configuration.

nbval names each notebook cell by its position ("Cell 7"), so inserting a cell renames every test after
it. Name them by the cell's id instead, which nbformat 4.5 keeps stable across edits.

nbval also gives up when the kernel's output messages pause for 5 s after a cell finishes; on a loaded
2-core machine (two pytest-xdist workers, grading subprocesses) that happened once after a long training
cell. Allow 60 s; a cell that really hangs is still stopped by --nbval-cell-timeout.

Kernels start over private ipc sockets, retried (transformer_course.grading.kernel_start): over TCP, a port
picked for a kernel can be taken by another process before the kernel binds it.

PyTorch's own log lines on stderr ("W1126 12:04:52.99 24743 torch/utils/cpp_extension.py:183] No CUDA runtime is
found ...", printed when a CUDA build of torch imports torch.utils.benchmark on a machine without a GPU) say
something about the machine, not the lesson: nbval compares outputs without them.
"""

import re

import nbformat
from nbval.plugin import IPyNbCell

from transformer_course.grading.kernel_start import start_kernel
from transformer_course.grading.nbval_patches import start_kernels_with

OUTPUT_TIMEOUT = 60
start_kernels_with(start_kernel)

TORCH_LOG_LINE = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ torch/\S+:\d+\] .*(\n|$)", re.MULTILINE)


def without_torch_log_lines(outputs: list) -> list:
    """``outputs`` (a cell's) with PyTorch's log lines taken out of its stderr; a stderr left empty is dropped."""
    kept = []
    for output in outputs:
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            text = TORCH_LOG_LINE.sub("", output.get("text", ""))
            if not text:
                continue
            output = nbformat.NotebookNode({**output, "text": text})
        kept.append(output)
    return kept


_compare_outputs = IPyNbCell.compare_outputs


def _compare_without_torch_logs(self, test, ref, skip_compare=None):
    return _compare_outputs(self, without_torch_log_lines(test), without_torch_log_lines(ref), skip_compare)


IPyNbCell.compare_outputs = _compare_without_torch_logs


def pytest_collection_modifyitems(items):
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None or not hasattr(item, "cell_num") or not cell.get("id"):
            continue
        item.output_timeout = max(getattr(item, "output_timeout", 0), OUTPUT_TIMEOUT)
        item.name = cell["id"]
        item._id = item.parent.id.child(item.name)  # pytest 9 derives nodeid from this structured id
