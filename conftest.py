"""Repository-wide pytest configuration.

nbval names each notebook cell by its position ("Cell 7"), so inserting a cell renames every test after
it. Name them by the cell's id instead, which nbformat 4.5 keeps stable across edits.

nbval also gives up when the kernel's output messages pause for 5 s after a cell finishes; on a loaded
2-core machine (two pytest-xdist workers, grading subprocesses) that happened once after a long training
cell. Allow 60 s; a cell that really hangs is still stopped by --nbval-cell-timeout.

Kernels start over private ipc sockets, retried (transformer_course.grading.kernel_start): over TCP, a port
picked for a kernel can be taken by another process before the kernel binds it. They are forked from a process that
has imported torch and ipykernel (kernel_zygote), as the grader's are: about 1 CPU-s less per notebook.

PyTorch's own log lines on stderr ("W1126 12:04:52.99 24743 torch/utils/cpp_extension.py:183] No CUDA runtime is
found ...", printed when a CUDA build of torch imports torch.utils.benchmark on a machine without a GPU) say
something about the machine, not the lesson: nbval compares outputs without them.
"""


from transformer_course.grading import kernel_zygote
from transformer_course.grading.kernel_start import start_kernel
from transformer_course.grading.nbval_patches import compare_without_torch_log_lines, start_kernels_with

OUTPUT_TIMEOUT = 60
_ZYGOTE = kernel_zygote.Shared()  # one per pytest process, started with its first kernel


def _start_kernel(make_manager, **kwargs):
    """kernel_start.start_kernel, the kernel forked from a zygote that has imported torch and ipykernel
    (transformer_course/grading/kernel_zygote.py)."""
    return start_kernel(kernel_zygote.forking(make_manager, _ZYGOTE.address()), **kwargs)


start_kernels_with(_start_kernel)
compare_without_torch_log_lines()


# Seconds each file keeps one worker busy in a `make test` of a fresh clone on a 2-core Intel Xeon (AVX-512), measured
# 2026-11-26 (tests/test_exercise_checks.py since estimated from its change: 12.4 trains one model, not two;
# tests/test_notebooks.py, 12 s since its stubs share a kernel, is left to the end).
# pytest-xdist (--dist loadfile --no-loadscope-reorder) hands whole files to its two workers in collection order, so
# the longest start first and the short ones fill the gaps at the end; unlisted files follow in their own order. With
# xdist's default order (by test count) the one-test release grading started last and one worker ran it alone.
FILE_SECONDS = {
    "tests/test_grading_e2e.py": 235,
    "tests/test_book.py": 135,
    "lessons/11_beyond_the_original.ipynb": 129,
    "tests/test_exercise_checks.py": 110,
    "tests/test_grading_release.py": 107,
    "lessons/09_training_a_translator.ipynb": 84,
    "lessons/12_capstone_real_words.ipynb": 82,
    "lessons/10_generation_and_kv_cache.ipynb": 77,
    "lessons/13_gpt_on_real_text.ipynb": 72,
    "tests/test_journal.py": 62,
    "tests/test_gradescope.py": 55,
    "solutions/12_capstone_real_words.ipynb": 43,
    "tests/test_lab.py": 38,
    "solutions/13_gpt_on_real_text.ipynb": 36,
    "lessons/05_self_and_cross_attention.ipynb": 28,
    "tests/test_capstone.py": 25,
    "lessons/02_attention.ipynb": 16,
    "lessons/04_multi_head_attention.ipynb": 15,
    "tests/test_launch.py": 14,
}


# Files that mostly wait (kernels that die on start, each noticed after a second): the second worker takes them first,
# beside the first file's grading of the fabricated class, whose four jobs keep both cores busy meanwhile. Taken after
# the long files, tests/test_kernel_start.py left a core idle for about 15 s (its 20 s of wall time used 1.3 CPU-s).
MOSTLY_WAITING = ["tests/test_kernel_start.py"]


def _order(file: str) -> float:
    """Sort key of a file: the longest first, except that the files that mostly wait come second."""
    if file in MOSTLY_WAITING:
        return -max(FILE_SECONDS.values()) + 0.5
    return -FILE_SECONDS.get(file, 0)


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: _order(item.nodeid.split("::")[0]))  # stable: files stay whole
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None or not hasattr(item, "cell_num") or not cell.get("id"):
            continue
        item.output_timeout = max(getattr(item, "output_timeout", 0), OUTPUT_TIMEOUT)
        item.name = cell["id"]
        item._id = item.parent.id.child(item.name)  # pytest 9 derives nodeid from this structured id
