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

from transformer_course.grading.kernel_start import start_kernel
from transformer_course.grading.nbval_patches import compare_without_torch_log_lines, start_kernels_with

OUTPUT_TIMEOUT = 60
start_kernels_with(start_kernel)
compare_without_torch_log_lines()


# Seconds each file keeps one worker busy in a `make test` of a fresh clone on a 2-core Intel Xeon (AVX-512), measured
# 2026-11-26 (book, lessons 09 and 11 and e2e since estimated from their changes).
# pytest-xdist (--dist loadfile --no-loadscope-reorder) hands whole files to its two workers in collection order, so
# the longest start first and the short ones fill the gaps at the end; unlisted files follow in their own order. With
# xdist's default order (by test count) the one-test release grading started last and one worker ran it alone.
FILE_SECONDS = {
    "tests/test_grading_e2e.py": 250,
    "tests/test_exercise_checks.py": 217,
    "tests/test_grading_release.py": 150,
    "lessons/11_beyond_the_original.ipynb": 148,
    "lessons/09_training_a_translator.ipynb": 130,
    "tests/test_book.py": 130,
    "lessons/12_capstone_real_words.ipynb": 124,
    "lessons/10_generation_and_kv_cache.ipynb": 107,
    "lessons/13_gpt_on_real_text.ipynb": 107,
    "tests/test_gradescope.py": 86,
    "tests/test_journal.py": 81,
    "tests/test_notebooks.py": 69,
    "solutions/12_capstone_real_words.ipynb": 59,
    "solutions/13_gpt_on_real_text.ipynb": 56,
    "tests/test_lab.py": 55,
    "lessons/05_self_and_cross_attention.ipynb": 54,
    "tests/test_capstone.py": 24,
    "tests/test_lesson13_checks.py": 24,
}


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: -FILE_SECONDS.get(item.nodeid.split("::")[0], 0))  # stable: files stay whole
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None or not hasattr(item, "cell_num") or not cell.get("id"):
            continue
        item.output_timeout = max(getattr(item, "output_timeout", 0), OUTPUT_TIMEOUT)
        item.name = cell["id"]
        item._id = item.parent.id.child(item.name)  # pytest 9 derives nodeid from this structured id
