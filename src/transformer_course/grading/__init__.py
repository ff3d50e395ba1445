"""Grading learners' notebooks: ``transformer-course grade SUBMISSIONS/ --out grades.csv``.

For every student and every released exercise notebook (a *unit*), the grader

1. reads the submission (:mod:`.collect`) and rebuilds it on top of the released notebook: check and
   read-only cells restored, nbval markers stripped, tampering noted (:mod:`.prepare`);
2. executes it with pytest + nbval in a fresh kernel, in a subprocess with cell and notebook time
   limits and a memory limit (:mod:`.execute`, :mod:`.plugin`; the limits are defined once, in
   :mod:`.limits`); the check cells record the learner's results (:mod:`.kernel`), which are re-checked
   outside the kernel (:mod:`.replay`);
3. turns what happened into one row per exercise (:mod:`.verdict`) and writes the gradebook
   (:mod:`.gradebook`), the summary and the feedback pages (:mod:`.report`) and the class report
   (:mod:`.classpage`), in the tables and pages of :mod:`.layout`.

:func:`transformer_course.grading.grader.grade` runs it all. This ``__init__`` imports nothing: the
grader's check runs inside learners' kernels as ``transformer_course.grading.kernel``, and importing
that module must stay cheap.
"""
