"""How far a training lesson's results move with the machine's numerics and the seed.

The stored outputs of a lesson come from one machine; nbval re-executes the lesson on others, whose CPUs,
vector units, thread counts and BLAS paths round differently, so a trained model takes another trajectory.
This script executes a lesson, top to bottom in a fresh kernel, under several numerics configurations
(environment variables read by PyTorch, OpenMP and MKL) and two seeds, and prints the metrics that the
lesson's asserts test, with their minimum, median and maximum, so that each asserted threshold can be set
clearly below what every configuration reaches.

Another seed is obtained without editing the lesson: a cell inserted after the ``setup`` cell shifts every
``torch.manual_seed(s)`` call to ``s + offset`` (initial weights and training order change; the data sets,
drawn from their own seeds, do not).

    python benchmarks/numerics_spread.py lessons/09_training_a_translator.ipynb
    python benchmarks/numerics_spread.py lessons/10_generation_and_kv_cache.ipynb --configs default aten=default
    python benchmarks/numerics_spread.py LESSON --seeds 0 1 2 --json results.json

Each run takes as long as the lesson (about 30-70 s on 2 cores); the defaults run 8 configurations x 2 seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# name -> environment variables. PyTorch reads ATEN_CPU_CAPABILITY (its vectorised kernels: default = no
# SIMD, avx2, avx512), OpenMP OMP_NUM_THREADS, MKL MKL_CBWR (conditional numerical reproducibility: a code path
# that gives the same bits on every CPU) and MKL_ENABLE_INSTRUCTIONS (the widest instruction set MKL may use).
CONFIGS = {
    "default": {},
    "threads=1": {"OMP_NUM_THREADS": "1"},
    "threads=3": {"OMP_NUM_THREADS": "3"},
    "aten=default": {"ATEN_CPU_CAPABILITY": "default"},
    "aten=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "mkl=compatible": {"MKL_CBWR": "COMPATIBLE"},
    "avx2-cpu": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "portable-1": {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1"},
    "portable-2": {"MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "3"},
}
DEFAULT_CONFIGS = ["default", "threads=1", "threads=3", "aten=default", "aten=avx2", "mkl=compatible", "avx2-cpu",
                   "portable-1"]

# lesson file name -> {metric: (cell id, Python expression)}: the expression is evaluated in the lesson's namespace
# right after that cell ran. Each metric is one that an assert of the lesson tests; the comment gives the assert.
METRICS = {
    "05_self_and_cross_attention.ipynb": {
        "digits from source, with cross": ("results", "means['with cross-attention'][0]"),  # > 0.75
        "digits from source, without": ("results", "means['without cross-attention'][0]"),  # < 0.4
        "without - counting, digits": (
            "results", "abs(means['without cross-attention'][0] - means['counting'][0])"),  # < 0.1
        "fixed tokens, worst model": (
            "results", "min(means['with cross-attention'][1], means['without cross-attention'][1])"),  # > 0.98
        "whole dates, with cross": ("results", "exact['with cross-attention']"),  # > 0.3
        "whole dates, without": ("results", "exact['without cross-attention']"),  # < 0.01
        "alignment / uniform, worst field": (
            "trained-alignment", "min(cross[r, s:s + n].sum(-1).mean().item() * n_enc / n"
                                 " for r, s, n in fields.values())"),  # > 1.15
        "unmasked drop, as padded": ("trained-padding", "drops[0]"),  # > 0.01
        "unmasked drop, more - as padded": ("trained-padding", "drops[1] - drops[0]"),  # > 0
        "padding weight unmasked, least": (
            "padding-picture", "on_padding['every key allowed'][1:].min()"),  # > 0.02
    },
    "09_training_a_translator.ipynb": {
        "valid exact match": ("train-report", "history.metric('accuracy')[-1]"),  # >= threshold
        "loss first / last 25 steps": ("curves-check", "float(start / end)"),  # > 100
        "test exact match": ("test-accuracy", "test_accuracy"),  # >= threshold
        "worst format": ("per-format", "min(per_format.values())"),  # >= threshold
        "layers aligned": ("alignment-check", "len(aligned_layers)"),  # >= 1
        "layers aligned, every format": ("alignment-formats", "len(layers_for_all)"),  # >= 1
        "training seconds": ("train-report", "history.seconds"),
    },
    "10_generation_and_kv_cache.ipynb": {
        "valid exact match": ("train-report", "history.evals[-1]['accuracy']"),  # >= threshold
        "least greedy probability": ("step-by-step", "float(chosen.min())"),  # > 0.5
        "test exact match": ("test", "test_accuracy"),  # >= threshold
        "unseen exact match": ("test", "unseen_accuracy"),  # >= threshold
        "greedy - sampled at T=3": ("sampling-model", "test_accuracy - sampled[None][-1]"),  # > 0.05
        "top-2 - all at T=3": ("sampling-model", "sampled[2][-1] - sampled[None][-1]"),  # > 0
        "cached - full logits": ("cache-model", "difference"),  # < 1e-4
        "training seconds": ("train-report", "history.seconds"),
    },
    "11_beyond_the_original.ipynb": {
        "reference loss, worst seed": ("noise", "max(reference_losses)"),  # < 0.3
        "post-norm loss - token entropy": ("prenorm-entropy", "abs(post - frequency_entropy)"),  # < 0.05
        "pre-norm / post-norm loss": ("prenorm-entropy", "pre / post"),  # < 0.5
        "warmed-up post-norm / post-norm": ("prenorm-entropy", "post_warm / post"),  # < 0.5
        "RMSNorm / worst reference": ("rms-train", "final_loss('RMSNorm') / max(reference_losses)"),  # < 2
        "FFN variants / worst reference": (
            "ffn-train", "max(final_loss(n) for n in ffn_names) / max(reference_losses)"),  # < 2
        "positions, least exact match 2-6": ("extrapolation-eval", "min(mean(exact[k][trained]) for k in kinds)"),
        "positions, most exact match 8-10": ("extrapolation-eval", "max(max(exact[k][6:]) for k in kinds)"),  # < 0.3
        "rotary - best other, forced 7-10": ("extrapolation-eval", "mean(forced['rotary'][longer]) - max("
                                             "mean(forced['learned'][longer]), mean(forced['sinusoidal'][longer]))"),
        "learned rows: change / 10 decay": ("learned-rows", "float(change[:seen].min() / (10 * (1 - shrink)))"),
        "GQA variants / worst reference": (
            "gqa-train", "max(final_loss(n) for n in gqa_names) / max(reference_losses)"),  # < 3
        "GQA variants, least exact match": (
            "gqa-train", "min(accuracy(runs[n][0], valid_pairs) for n in gqa_names)"),  # > 0.7
    },
    "12_capstone_real_words.ipynb": {
        "validation exact match, last step": ("train-report", "final_valid"),  # >= 0.95
        "loss - entropy of q": ("curves", "float(running[-1] - floor)"),  # in [0, 0.05)
        "p(right token), smoothed": ("confidence", "float(right.mean())"),  # in (0.85, 0.95)
        "validation exact match, greedy": ("decoders", "final_greedy"),  # >= 0.95
        "validation exact match, beam 4": ("decoders", "final_beam"),  # >= 0.95
        "tuned without smoothing, exact match": ("recipe-table", "exact_plain"),  # >= 0.95
        "p(right token), no smoothing": ("recipe-table", "plain_p"),  # > 0.97
        "cross-entropy, smoothed / plain": ("recipe-table", "smooth_ce / plain_ce"),  # > 2
        "German: layers with the swap": ("align-plot", "len(swapped)"),  # >= 1
        "French validation exact match": ("french-valid", "fr_exact"),  # >= 0.9
        "French: layers where 'dix-' reads the unit": ("french-align", "len(by_unit)"),  # >= 1
        "test exact match, least of the two": ("final-test", "min(em for em, _, _ in scores.values())"),  # >= 0.9
        "training seconds": ("train-report", "history.seconds"),
    },
}

# Lessons 10 and 11 after the trim of 2026-11-27 (issue 30 item 6), torch 2.13.0, this machine kind (2 cores) shared
# with other jobs at a load of 2-7, so the seconds are inflated. Lesson 10 trains 400 steps of 128 instead of 600
# (same learning rate and warm-up); section 10.7 times 32, 128 and 384 tokens instead of 64, 256 and 512 (the no-cache
# run of 512 tokens alone took about half of that cell); section 10.8 profiles 20 steps per round instead of 50 (still
# the best of 3 rounds). Lesson 11's reference-shaped runs (sections 11.1, 11.3, 11.4, 11.6: seven models) were
# measured at 250 steps of 64 instead of 300 (the table below), and the lesson keeps 300: the saving (about 4 s of its
# cells' wall time) was below the load's noise, it cost the GQA claim a third of its margin (0.826 -> 0.79 against
# > 0.7), and benchmarks/variants_seeds.py measures the lesson's 300-step settings.
# numerics_spread.py --configs default portable-1 portable-2 aten=avx2 --seeds 0 1 (lesson 11: portable-2 with seed
# +1 not run, for time; the lesson trains on one thread, so portable-2 matches default to 3 digits, as with seed +0):
#
#   lesson 10, metric (assert)                     min      median   max      (8 runs, no failing cell)
#   validation exact match, step 400 (>= 0.98)     0.998    1        1
#   least greedy probability (> 0.5)               0.989    0.994    0.997
#   test exact match (>= 0.98)                     0.998    0.999    1
#   unseen exact match (>= 0.97)                   0.997    0.998    1
#   greedy - sampled at T=3 (> 0.05)               0.907    0.913    0.920
#   top-2 - all at T=3 (> 0)                       0.459    0.494    0.522
#   cached - full logits (< 1e-4)                  0        8e-7     2.4e-6
#   kernel CPU seconds (whole lesson)              42.9     54.0     81.3
#
# Tried for lesson 10 (a script repeating its cells, default numerics, seeds +0 / +1): 300 steps of 128: test 0.989 /
# 0.993, unseen 0.983 / 0.989 (too close to 0.98 / 0.97); 350 of 128: test 0.995 / 0.999, unseen 0.992 / 0.998;
# 400 of 64: test below 0.98 with seed +0 (fails); 500 of 64: test 0.991, unseen 0.986 (seed +0). The 600-step lesson
# had 0.999 / 0.998 (seed +0). A step of 128 costs about 50 ms of CPU on one thread, so 200 fewer steps save about 10 s.
# Sections 10.7-10.8 (timings on one thread, measured in the kernel: process CPU seconds): the generation calls of
# 10.7 took 14.2 s for 3 rounds of 64/256/512 tokens and take 5.6 s for 32/128/384 (the no-cache run of 512 tokens
# alone took 2.4 s a round); the profiler of 10.8 took 8.0 s at 50 calls per round and takes 3.3 s at 20.
# The speed-up of the cache still grows with the length (stored run, load 5: 2.5x, 4.0x, 7.0x).
#
#   lesson 11 at 250 steps (not adopted), metric   min      median   max      (7 runs, no failing cell)
#   reference loss, worst seed (< 0.3)             0.060    0.099    0.099
#   post-norm loss - token entropy (< 0.05)        0.003    0.004    0.004
#   pre-norm / post-norm loss (< 0.5)              0.388    0.391    0.400
#   warmed-up post-norm / post-norm (< 0.5)        0.307    0.311    0.353
#   RMSNorm / worst reference (< 2)                0.911    0.988    0.988
#   FFN variants / worst reference (< 2)           1.000    1.003    1.131
#   positions, least exact match 2-6 (> 0.85)      0.935    0.969    0.975
#   positions, most exact match 8-10 (< 0.3)       0        0.02     0.035
#   rotary - best other, forced 7-10 (> 0)         0.256    0.403    0.414
#   learned rows: change / 10 decay (> 1)          14.4     15.9     15.9
#   GQA variants / worst reference (< 3)           1.279    1.279    2.133
#   GQA variants, least exact match (> 0.7)        0.788    0.796    0.796
#   kernel CPU seconds (whole lesson)              86.9     107.5    178.2
#
# At 300 steps (the lesson before) the GQA least exact match was 0.826 (seed +0, default and aten=avx2). Tried for the
# seven reference-shaped runs (a script repeating them, default numerics, seeds +0 / +1): 250 steps: GQA least exact
# match 0.796 / 0.788, GQA / worst reference 1.28 / 2.13, worst reference 0.099 / 0.060; 200 steps: GQA least exact
# match 0.732 / 0.754 (too close to 0.7). A step costs about 22 ms of CPU, so 50 fewer steps save about 8 s over the
# seven models. The prose claims of sections 11.3, 11.4 and 11.6 hold at 250 steps with both seeds: RMSNorm's loss
# lies between the two reference seeds' (0.098 between 0.060 and 0.099; seed +1: 0.055 between 0.040 and 0.060), the
# FFNs end within about one seed spread of the reference's mean (+0.5 and -0.6 spreads), multi-query about one above.
#
# Before and after, back to back (nbval of the whole lesson, CPU seconds user + system of pytest and its kernel):
# lesson 10: 81.3 before, 57.5 after (load 3.0-3.3; nbval wall 94 s and 70 s; train 33 s, speed 25 s -> 8 s,
# step-profile 13 s -> 4 s). Lesson 11, two pairs: 108.8 before, 116.3 after (load 3.1-3.8), then 106.3 after, 106.9
# before (load 1.1-3.3): the saving of its seven shorter runs (noise + rms + ffn + gqa cells 41.3 s -> 37.3 s of wall in
# the second pair) is below the load's noise; the cells that dominate it (11.5's position models, 34 s, and 11.2's
# 8-block runs, 14 s) are unchanged.
#
# Lessons 09 and 11 after the second trim of 2026-11-26 (issue 30: `make test` within 10 minutes), torch 2.13.0,
# this machine kind (Xeon, AVX-512, 2 cores) shared with other jobs at a load of 5-9.
# Lesson 09 trains on batches of 64 instead of 128, at a peak learning rate of 3e-3 after 50 warm-up steps (was 2e-3
# after 100), still 500 steps: one pass over 32,000 training pairs (the first 32,000 of the former 60,000, so the
# batches are the same rows as before). Lesson 11's 8-block pre-norm comparison trains 100 steps with 35 warm-up steps
# for the rescued post-norm run (was 150 and 50); its other runs are unchanged.
# "mirror" runs are a script that repeats the lesson's cells (same data, seeds and calls) outside the notebook.
#
#   lesson 09, metric (assert)                     default   default   threads=1   aten=avx2   aten=default
#                                                  seed +0   seed +1*  seed +0     seed +0     seed +0
#   validation exact match, step 500 (>= 0.98)     0.996     0.992     0.998       0.996       1.000
#   loss first / last 25 steps (> 100)             791       631       850         682         739
#   test exact match (>= 0.98)                     0.999     0.997     0.998       0.997       1.000
#   worst format (>= 0.95)                         0.990     0.975     0.990       0.980       0.980
#   layers aligned, all formats too (>= 1)         2 / 2     -         2 / 2       2 / 2       2 / 2
#   kernel CPU seconds (whole lesson)              -         -         103         88          106
#   (* mirror run)
#
# Before and after, back to back on the same machine (numerics_spread.py, default, seed +0, load 1-3.4, both cores):
# the old lesson (500 steps of 128) ran 126 s of wall time, its training 90 s, 125 s of kernel CPU time; the new one
# 93 s, its training 60 s, 96 s of kernel CPU time (valid 0.996, test 0.999, worst format 0.990, loss ratio 791).
# Batches of 64 halve the training's arithmetic but use the second core less well, so the wall time falls by a third.
#
# The training's CPU time (mirror, default numerics, load 3-5): a step of 128 takes about 0.27 s of CPU (measured over
# 60 steps; about 135 s for 500), 500 steps of 64 take 68-71 s, evaluations included. The whole lesson under the old
# settings took 182 s of kernel CPU time (table below, load 10-19). Tried and not used: 500 steps of 64 at the old 2e-3
# / 100 warm-up (mirror, seed +0: test 0.994 but worst format 0.960, too close to 0.95); 250 steps of 128 at 4e-3 / 50
# (test 0.964, worst format 0.880: fails).
#
#   lesson 11 (mirror runs; the lesson trains on one thread, so only ATEN_CPU_CAPABILITY changes its numerics)
#   metric (claim)                                 default   aten=avx2   aten=default   default
#                                                  seed +0   seed +0     seed +0        seed +1
#   post-norm loss - token entropy (< 0.05)        0.004     0.004       0.004          0.003
#   pre-norm / post-norm loss (< 0.5)              0.39      0.39        0.39           0.40
#   warmed-up post-norm / post-norm (< 0.5)        0.31      0.31        0.31           0.35
#
# The whole lesson under aten=avx2, seed +0 (numerics_spread.py, load 5-7): every cell passes; pre / post 0.391, warm /
# post 0.311, post-norm - entropy 0.004, least exact match on 2-6 digits 0.969, GQA least exact match 0.826, kernel CPU
# time 109 s (the lesson trains on one thread, so on an idle machine its wall time is about its CPU time).
# In the lesson as executed (default, seed +0): pre-norm 0.916 and warmed-up post-norm 0.720 against post-norm 2.344
# (exact match 18% and 42%, against 52% and 62% after 150 steps). The cut saves about a third of the three 8-block runs
# (about 10 of the lesson's 158 worker-seconds on the last fresh-clone run); the rest of the lesson is unchanged.
# Tried and not used (mirror runs): the pre-norm comparison with 6 blocks at 150 steps (seed +0: post-norm no longer
# stalls, loss 0.674, pre / post 0.54, the claim fails); the three position models (section 11.5, least exact match on
# 2-6 digits > 0.85) at 300 steps of 128: 0.939 with seed +0 but 0.858 with seed +1 (at the lesson's 350 steps, seed
# +1: 0.935); at 350 steps of 64: 0.870; at 250 of 128: 0.860 (at lr 1e-2: 0.828), all too close to 0.85.
# The reference-shaped runs (sections 11.1, 11.3, 11.4, 11.6: 300 steps of 64) were not tried shorter: their claims
# (exact match > 70% for multi-query attention, 82.6% at 300 steps) leave little room.
#
# Lessons 09 and 12 after the trim of 2026-11-26 (issue 30, item 6: a training lesson within 120 s), torch 2.13.0,
# seed +0, on this machine kind shared with other jobs (load 10-19, so the wall seconds are several times an idle
# run's and the kernel CPU seconds are inflated too). Lesson 12: the German and French runs take 150 steps, 100 of
# warm-up to the paper's peak at d = 64 (1.25e-2), then the cosine; section 12.5 continues the trained model 50 steps
# without smoothing instead of training a second model; the schedule and dropout comparisons moved to
# benchmarks/capstone_recipe.py (whose results the lesson quotes). Lesson 09: 500 training steps instead of 700.
# (portable-1: ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1; portable-2: MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=3)
#
#   lesson 12, metric (assert)                           default   portable-1   portable-2
#   validation exact match, last step (>= 0.95)          0.988     0.994        0.986
#   loss - entropy of q (in [0, 0.05))                   0.026     0.027        0.037
#   p(right token), smoothed (0.85 .. 0.95)              0.898     0.898        0.896
#   validation exact match, greedy (>= 0.95)             0.988     0.994        0.986
#   validation exact match, beam 4 (>= 0.95)             0.986     0.994        0.990
#   tuned without smoothing, exact match (>= 0.95)       0.996     0.998        0.994
#   p(right token), no smoothing (> 0.97)                0.995     0.996        0.995
#   cross-entropy, smoothed / plain (> 2)                17.9      25.5         16.8
#   German / French layers with the pattern (>= 1)       2 / 2     2 / 2        2 / 1
#   French validation exact match (>= 0.9)               0.968     0.992        0.978
#   test exact match, least of the two (>= 0.9)          0.978     0.988        0.980
#   kernel CPU seconds (whole lesson)                    121       144          262
#
# The same German run with seed 1 (benchmarks/capstone_recipe.py schedule, default numerics) ends at 0.980.
#
#   lesson 09, metric (assert)                           default   portable-1   portable-2
#   validation exact match, step 500 (>= 0.98)           0.996     1.000        0.998
#   loss first / last 25 steps (> 100)                   844       878          907
#   test exact match (>= 0.98)                           0.994     0.997        0.996
#   worst format (>= 0.95)                               0.990     0.995        0.995
#   layers aligned, all formats too (>= 1)               2 / 2     2 / 2        2 / 2
#   kernel CPU seconds (whole lesson)                    182       206          405
#
# A 400-step version of lesson 09 (the same mirror of its cells, default numerics) failed two asserts: test exact
# match 0.977 and worst format 0.930.
#
# Lessons 09 and 12 on one thread (issue 30, item 6, third trim, 2026-11-27), torch 2.13.0, this machine kind (2 cores
# shared with two other agents' jobs, load 4-6). Both lessons now call torch.set_num_threads(1) in their setup cell, as
# lessons 10 and 11 do: their models are small, so a second thread could save at most about a third of the wall time and
# costs about a third more CPU time (lesson 09's training, 100 steps of 64: 6.6-6.8 CPU-s on one thread, 8.3-8.9 on
# two), and one thread makes the trained weights independent of the core count, so that OMP_NUM_THREADS no longer moves
# the results. The lessons' runs keep their settings (lesson 09: 500 steps of 64 at 3e-3; lesson 12: 150 steps for the
# German and the French runs), so under default numerics they now take the trajectory that the configuration threads=1
# measured before (lesson 09, seed +0: 0.998 / 850 / 0.998 / 0.990 in the table above, the same here), and portable-1 is
# the same run as before. Lesson 12 also evaluates every 75 steps instead of 50 (evaluations do not change the
# training), times its greedy decoding once instead of decoding twice, trains the French BPE of 100 once, and continues
# section 12.4's model 25 steps without smoothing instead of 50 (section 12.5).
#
# CPU seconds of the nbval run (/usr/bin/time, user + system, pytest and kernel; default numerics). Run apart, at load
# 2-6 before and 5 after: lesson 09 82.8 -> 68.9, lesson 12 81.7 -> 68.8 (27 CPU-s less together). Run as pairs, the old
# lesson (commit 9e557c2) beside the new one at the same time, load 2-3: lesson 09 100.1 -> 92.5, lesson 12 88.7 -> 79.2
# (17 CPU-s less together). The CPU seconds of this shared machine move by 20-30% from run to run (lesson 09, new, alone
# at load 2: 104.9), so the saving is 17-27 CPU-s, not a sharper figure. Under ATEN_CPU_CAPABILITY=default
# OMP_NUM_THREADS=1 both lessons pass nbval (106.8 and 108.4 CPU-s at load 5).
#
# The spread, numerics_spread.py --configs default portable-1 portable-2 aten=avx2 --seeds 0 1, one thread in every
# configuration (two lessons ran side by side, so the seconds are inflated):
#
#   lesson 09, metric (assert)                  min      median   max      failing runs
#   validation exact match, step 500 (>= 0.98)  0.992    0.996    1.000    0 of 8
#   loss first / last 25 steps (> 100)          527      631      850      0
#   test exact match (>= 0.98)                  0.991    0.997    0.999    0
#   worst format (>= 0.95)                      0.955    0.970    0.990    0
#   layers aligned, all formats too (>= 1)      2 / 2    2 / 2    2 / 2    0
#   kernel CPU seconds (whole lesson)           61       78       159      (portable-2: MKL_CBWR=COMPATIBLE is slow)
#
# The worst format is the tight claim: 0.955 (portable-1, seed +1), 0.965 (portable-1 and aten=avx2 seed +0 / +1).
# portable-1 was a one-thread run before this change too, so this margin is not new; before it, the runs measured
# were 0.975-0.990. Shorter runs fail it (mirrors of the lesson, threads=1): 400 steps at 4e-3 with 40 warm-up steps
# reach 0.950 (seed +0) and 0.940 (seed +1), 350 steps at 4e-3 0.885 (and fail the test and validation asserts too),
# so the lesson keeps its 500 steps.
# That assert asked for >= 0.95 until 2026-11-27, a margin of one date in 200 over the least of these runs; a reader's
# CPU takes a trajectory of its own, so it now asks for >= 0.9 (at least 180 of each format's 200 dates), 0.055 below
# the least run. It still fails the undertrained model: 350 steps reach 0.885.
#
#   lesson 12, metric (assert)                       min      median   max      failing runs
#   validation exact match, last step (>= 0.95)      0.972    0.989    0.994    0 of 8
#   loss - entropy of q (in [0, 0.05))               0.027    0.030    0.036    0
#   p(right token), smoothed (0.85 .. 0.95)          0.893    0.896    0.898    0
#   valid. exact match, greedy, beam 4 (>= 0.95)     0.972    0.989    0.994    0
#   25 steps unsmoothed, exact match (>= 0.95)       0.982    0.993    0.996    0   (50 steps: 0.994-0.998)
#   p(right token), no smoothing (> 0.97)            0.988    0.989    0.991    0   (50 steps: 0.995-0.996)
#   cross-entropy, smoothed / plain (> 2)            7.6      8.9      10.9     0   (50 steps: 16.8-25.5)
#   German / French layers with the pattern (>= 1)   2 / 1    2 / 2    2 / 2    0
#   French validation exact match (>= 0.9)           0.850    0.936    0.992    3 (seed +1: default, portable-2,
#                                                                                aten=avx2)
#   test exact match, least of the two (>= 0.9)      0.864    0.948    0.988    2 (seed +1: portable-2, aten=avx2)
#   kernel CPU seconds (whole lesson)                61       80       166
#
# Seed +0 passes every assert under all four configurations (French 0.964-0.992, test 0.972-0.988); seed +1 does not:
# its French run reaches 0.882-0.908 (0.850 under portable-2), and the French test exact match drags the final
# table's least of the two below 0.9. The French asserts have no margin across trajectories. portable-1 seed +1
# (0.908) was a one-thread run before this change too, so the risk is not new:
# the lesson as it was before this change (two threads, 50 steps without smoothing), default numerics, seed +1, fails
# the same two asserts: French validation exact match 0.850, test exact match, least of the two 0.830 (kernel CPU
# seconds 105, against 61-84 for the one-thread lesson under default, portable-1 and aten=avx2). A 150-step French run
# is too short to hold 0.9 on every trajectory. So the French asserts are now >= 0.8 (the German ones stay >= 0.9):
# 0.850 is the least French validation and 0.864 the least French test exact match of all 8 runs, seed +1 included,
# and the prose no longer calls the French result "close to German's" (it states both, from glue). The stored run
# (seed +0, default): French validation 96.4%, test 97.8%; German test 98.0%.
#
# Before the trim (history):
# Lesson 12, measured on 2026-11-26 (torch 2.13.0, this machine kind, seed +0), after the lesson moved every choice
# to the validation split and its German runs to 300 steps (section 12.4 warm-up + cosine; 12.5 the same run without
# smoothing and with the paper's schedule; 12.6 dropout on 150 pairs, 300 steps, the paper's schedule):
#
# (portable-1: ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1; runs of 1893 s and 2309 s with the machine shared)
#
#   metric (assert)                               default   portable-1
#   validation exact match, step 300 (>= 0.95)     0.992     0.990
#   loss - entropy of q (in [0, 0.05))             0.015     0.012
#   p(right token), smoothed (0.85 .. 0.95)        0.900     0.900
#   validation exact match, greedy/beam (>= 0.95)  0.992     0.990
#   recipes, least exact match (> 0.6)             0.992     0.990
#   paper's schedule, last 3 evals, range          0.315     0.184         (not asserted: the dip at the peak)
#   p(right token), no smoothing (> 0.97)          0.999     0.997
#   cross-entropy, smoothed / plain (> 2)          79.6      22.0
#   dropout: least fit of the small set (>= 0.95)  0.993     0.093  FAILED (the old design; see below)
#   dropout: gap closed (> 0)                      0.033     -0.080  FAILED (the old design; see below)
#   German / French layers with the pattern (>= 1) 2 / 2     2 / 2
#   French validation exact match (>= 0.9)         0.998     0.994
#   test exact match, least of three (>= 0.9)      0.988     0.992
#
# Under portable-1 one of the two small dropout models of that design (the paper's schedule at its full d = 64 peak,
# 8.8e-3, on 150 pairs) fit only 9.3% of its 150 training pairs, and the dropout-table assert failed. The lesson now
# trains the dropout runs with warm-up 50 and cosine from 5e-3 (300 steps), measured with a script mirroring the cell
# (150 pairs, seeds 0 and 1), exact match on the training pairs / gap to validation at step 300:
#
#   configuration                       seed   p = 0           p = 0.3         gap closed
#   OMP_NUM_THREADS=1                   0      1.000 / 0.158   0.993 / 0.108   5.0 points
#   OMP_NUM_THREADS=1                   1      1.000 / 0.212   0.993 / 0.128   8.4 points
#   portable-1                          0      1.000 / 0.156   0.993 / 0.114   4.2 points
#   portable-1                          1      1.000 / 0.204   0.993 / 0.140   6.4 points
#
# so both asserts (fit >= 0.95, gap closed > 0) hold with room on every run; training continues to step 300 whatever
# the evaluations say.
# Earlier measurements of the 600-step design (the commit that lowered the smoothing assert to 2x) found the
# smoothed / plain cross-entropy at 8.3x-13.4x with the lesson's seed under default, portable-1 and portable-2 and
# 3.4x with seed +1 under portable-1; the dropout design (150 pairs, 300 steps, the paper's schedule) is the one those
# runs executed, and that commit names only the smoothing assert as failing. A 200-step cosine version of the dropout
# runs, tried for speed, closed 3.7 points with seed 0 but none with seed 1 (default numerics), so it was not used.

SEED_CELL = """\
# numerics_spread.py: the setup cell's seed and every torch.manual_seed(s) below become torch.manual_seed(s + {offset})
import torch as _torch
_manual_seed = _torch.manual_seed
_torch.manual_seed = lambda seed: _manual_seed(seed + {offset})
_torch.manual_seed(_torch.initial_seed())  # the setup cell's seed, shifted too
"""
# After a cell: its metrics, or why they could not be computed (a cell they need failed).
CAPTURE = """\
for _name, _expr in {metrics!r}.items():
    try:
        _spread[_name] = float(eval(_expr))
    except Exception as _error:
        _spread[_name] = repr(_error)
"""
MARK = "__NUMERICS_SPREAD__"


def run_once(path: Path, offset: int, timeout: int) -> dict:
    """Execute the lesson in a fresh kernel (this process's environment) and return its metrics and errors."""
    import nbformat
    from nbclient import NotebookClient

    from transformer_course.notebook_execution import current_env_kernel_manager

    nb = nbformat.read(path, as_version=4)
    by_cell: dict[str, dict[str, str]] = {}
    for name, (cell_id, expr) in METRICS[path.name].items():
        by_cell.setdefault(cell_id, {})[name] = expr
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        if cell.get("id") == "setup":
            seeds = SEED_CELL.format(offset=offset) if offset else ""
            cells.append(nbformat.v4.new_code_cell("_spread = {}\n" + seeds))
        if cell.get("id") in by_cell:
            cells.append(nbformat.v4.new_code_cell(CAPTURE.format(metrics=by_cell.pop(cell["id"]))))
    if by_cell:
        raise ValueError(f"{path.name} has no cells {sorted(by_cell)}")
    # The kernel's own CPU seconds (user + system, all its threads): the lesson's cost, less sensitive to load
    # than its wall time.
    last = ("import json, resource\n_usage = resource.getrusage(resource.RUSAGE_SELF)\n"
            "_spread['kernel CPU seconds'] = _usage.ru_utime + _usage.ru_stime\n"
            f"print({MARK!r} + json.dumps(_spread))")
    nb.cells = cells + [nbformat.v4.new_code_cell(last)]
    client = NotebookClient(nb, km=current_env_kernel_manager(), timeout=timeout, allow_errors=True,
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    begin = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - begin
    errors = [f"{c.get('id')}: {o.ename}: {o.evalue.splitlines()[0] if o.evalue else ''}"[:200]
              for c in nb.cells[:-1] if c.cell_type == "code" and c.get("id") for o in c.get("outputs", [])
              if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    values = json.loads(text.split(MARK, 1)[1]) if MARK in text else {}
    return {"metrics": values, "errors": errors, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lesson", type=Path)
    parser.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, choices=list(CONFIGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="seed offsets (0: the lesson's own)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument("--json", type=Path, help="also write every run's results to this file")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a single run, in a child process
    args = parser.parse_args()
    if args.lesson.name not in METRICS:
        parser.error(f"no metrics are defined for {args.lesson.name}; known: {', '.join(METRICS)}")
    if args.one:
        print(MARK + json.dumps(run_once(args.lesson, args.seeds[0], args.timeout)))
        return

    runs = []
    for seed in args.seeds:
        for config in args.configs:
            # A child process per run: the kernel inherits exactly this configuration's environment.
            env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", **CONFIGS[config]}
            child = subprocess.run([sys.executable, __file__, str(args.lesson), "--one", "--seeds", str(seed),
                                    "--timeout", str(args.timeout)], env=env, capture_output=True, text=True)
            if MARK not in child.stdout:
                result = {"metrics": {}, "errors": [f"the run failed: {child.stderr[-500:]}"], "seconds": 0.0}
            else:
                result = json.loads(child.stdout.split(MARK, 1)[1])
            runs.append({"config": config, "seed": seed, **result})
            failed = f"  FAILED CELLS: {'; '.join(result['errors'])}" if result["errors"] else ""
            shown = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                              for k, v in result["metrics"].items())
            print(f"[{config}, seed +{seed}] {result['seconds']:.0f} s: {shown}{failed}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))

    print(f"\n{args.lesson.name}: {len(runs)} runs ({len(args.configs)} configurations x {len(args.seeds)} seeds)")
    print(f"{'metric':<36}{'min':>10}{'median':>10}{'max':>10}")
    for name in [*METRICS[args.lesson.name], "kernel CPU seconds"]:
        values = [r["metrics"][name] for r in runs if isinstance(r["metrics"].get(name), float)]
        if values:
            print(f"{name:<36}{min(values):>10.4g}{statistics.median(values):>10.4g}{max(values):>10.4g}")
    failures = [r for r in runs if r["errors"]]
    print(f"runs with a failing cell: {len(failures)} of {len(runs)}")
    for r in failures:
        print(f"  {r['config']}, seed +{r['seed']}: {'; '.join(r['errors'])}")


# --- lesson 13 ----------------------------------------------------------------------------------------------------
# The in-lesson run (2 blocks, 500 steps) is the only training; the checkpoint's measurements move only with float
# rounding, so their spread is the numerics' alone. Measured on 2026-11-26 (torch 2.13.0, this machine kind, shared with
# other jobs at a load of 4-15, so the seconds are inflated), the whole lesson executed by this script:
# (portable-2: MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=3)
#
#   metric (claim)                              default  threads=1  aten=default  aten=avx2  portable-2  default
#                                               seed +0  seed +0    seed +0       seed +0    seed +0     seed +1
#   untrained - uniform, nats (< 0.1)           0.056    0.056      0.056         0.056      0.056       0.059
#   lesson run, nats per char                   2.197    2.197      2.197         2.197      2.197       2.228
#   bigram - lesson run, nats (> 0)             0.310    0.310      0.310         0.310      0.310       0.279
#   lesson run - checkpoint, nats (> 0)         0.736    0.736      0.736         0.736      0.736       0.768
#   checkpoint - its log, nats (< 1e-3)         0        0          3e-8          9e-8       3e-8        0
#   previous-token share, best head (> 0.5)     0.908    0.908      0.908         0.908      0.908       0.908
#   line start / even spread (> 5)              13.1     13.1       13.1          13.1       13.1        13.1
#   speaker's name / even spread (< 1.5)        0.93     0.93       0.93          0.93       0.93        0.93
#   second copy / first copy, loss (> 0.9)      1.009    1.009      1.009         1.009      1.009       1.009
#   induction score, best head (< 0.05)         0.0035   0.0035     0.0035        0.0035     0.0035      0.0035
#   lesson run, seconds                         59       71         103           85         315         77
#   kernel CPU seconds (whole lesson)           71       65         83            74         144         71
#
# Every claim holds on every run with room: the in-lesson run beats the bigram by 0.28-0.31 nats (the assert asks for
# more than 0), and the checkpoint's claims (0.91 against > 0.5, 13x against > 5x) do not move. No claim was changed.
# The lesson's samples use seeds of their own (1 before training, 2 after, 3 and 4 from the checkpoint), drawn from
# their own generators, so they change none of these numbers.
#
# Exercise 13.4's solution under the same configurations and other seeds: ``benchmarks/learning.py shakespeare``,
# recorded in ``checks/shakespeare_model.py`` (RUNS): 3.455 / 3.463 bits/char (public / hidden) with seed 0 under
# threads=1, aten=default, aten=avx2, 2 threads and MKL_CBWR=COMPATIBLE with 3 threads alike; 3.37-3.56 over seeds 0-3;
# full marks at 3.70.
METRICS["13_gpt_on_real_text.ipynb"] = {
    "untrained - uniform, nats": ("model-check", "abs(valid_loss_before - base['uniform'])"),  # < 0.1
    "lesson run, nats per char": ("run-report", "valid_loss_after"),  # < bigram
    "bigram, nats per char": ("baselines", "base['bigram']"),
    "bigram - lesson run, nats": ("run-report", "base['bigram'] - valid_loss_after"),  # > 0
    "lesson run - checkpoint, nats": ("compare", "valid_loss_after - gpt_loss"),  # > 0
    "checkpoint - its log, nats": ("checkpoint", "abs(gpt_loss - log['final_valid_loss'])"),  # < 1e-3
    "previous-token share, best head": ("scores-best", "scores['previous character'].max()"),  # > 0.5
    "line start / even spread, best head": (
        "scores-best", "scores['start of the line'].max() / even['start of the line']"),  # > 5
    "speaker's name / even spread, best head": (
        "scores-best", "scores[\"speaker's name\"].max() / even[\"speaker's name\"]"),  # < 1.5
    "second copy / first copy, loss": ("induction", "second / first"),  # > 0.9
    "induction score, best head": ("induction", "induction.max()"),  # < 0.05
    "lesson run, seconds": ("run-report", "history.seconds"),
}


if __name__ == "__main__":
    main()
