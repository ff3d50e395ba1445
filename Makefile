# The course's commands. `make book` and `make test` set up everything they need on a fresh machine:
# a virtual environment in .venv, the pinned requirements and the package itself (editable).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
# Touched after a successful install; re-install only when the pins or the package metadata change.
STAMP  := $(VENV)/.installed
# OpenMP threads that spin while they wait make torch 10-25x slower whenever the 2 cores are shared (by
# pytest-xdist's workers, notebook kernels or anything else); passive waiting costs nothing when they are not.
export OMP_WAIT_POLICY := PASSIVE

PYTEST_NB := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
             --nbval-cell-timeout 300
# Numerics other than this machine's default, for test-portable: no SIMD in PyTorch's own kernels and one thread;
# MKL's CPU-independent code path and three threads. Readers' CPUs round differently; the outputs must not care.
PORTABLE_1 := ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1
PORTABLE_2 := MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=3

.PHONY: help venv book slides test test-fast test-portable test-torch lint lab execute exercises bench requirements clean \
        distclean

help:
	@echo "make book        build the HTML book into _build/html (sets up .venv first)"
	@echo "make slides      build a reveal.js slide deck per lesson into _build/slides (make book builds them too)"
	@echo "make test        lint, unit tests, check tests, notebook tests, book build (sets up .venv first)"
	@echo "make test-fast    lint and the package, checks and authoring tests (no notebooks, grading runs, book): about 90 s"
	@echo "make test-portable  re-run lessons and solutions with nbval under two other numerics configurations"
	@echo "make test-torch TORCH=2.15.0  re-run lessons and solutions with nbval under another PyTorch release"
	@echo "make lab         open JupyterLab on the exercise notebooks"
	@echo "make execute     re-run lessons/ and solutions/ in place from a fresh kernel"
	@echo "make exercises   regenerate exercises/ from solutions/"
	@echo "make bench       speed and learning benchmarks (prints ratios; not part of make test)"
	@echo "make clean       remove build outputs (keeps .venv); make distclean removes .venv too"

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

# The book links every lesson page to its deck, so the decks are built with it (seconds).
book: $(STAMP) book/_static/logo.png slides
	$(BIN)/jupyter-book build -W -n --keep-going .
	@echo
	@echo "The book is at $(CURDIR)/_build/html/index.html, the slides in $(CURDIR)/_build/slides/"

# One reveal.js deck per lesson from its stored outputs; reveal.js and MathJax are copied next to the decks.
slides: $(STAMP)
	$(BIN)/transformer-course slides lessons --out _build/slides

book/_static/logo.png: src/transformer_course/viz.py $(STAMP)
	@mkdir -p book/_static
	$(BIN)/python -c "from transformer_course.viz import draw_logo; draw_logo('$@')"

lint: $(STAMP)
	$(BIN)/ruff check .

# Two pytest workers keep the 2 cores busy, so each process (worker, notebook kernel, grader) computes on one thread:
# a second thread only adds the cost of splitting small operations (lessons 05 and 13 and solutions 12 and 13 under
# nbval with 2 workers: 203 CPU-s on two threads, 187 on one), and the threads of `tokenizers` spin while they wait
# (lesson 13's three BPEs: 19 CPU-s on its pool, 12 on one thread, the same merges and ids).
# Outputs do not depend on it: test-portable runs the notebooks on one thread and on three.
# Bytecode is cached as Python does by default, even where the environment turns that off (PYTHONDONTWRITEBYTECODE=1):
# otherwise each of about 30 kernels compiles the course package again (0.14 CPU-s), and each pytest process
# rewrites and compiles the test files again (1.9 CPU-s). Graded notebooks still run without it (grading/execute.py).
test: lint
	PYTHONDONTWRITEBYTECODE= OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false $(BIN)/python -m pytest tests lessons solutions $(PYTEST_NB) -n 2 --dist loadfile \
	    --no-loadscope-reorder --durations=15

# Seconds, for a change to the package, checks or grader: tests/ without those marked slow (notebooks, kernels,
# the book, pip). make test before a commit.
test-fast: lint
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest tests -m "not slow" -n 2 -q -p no:cacheprovider

# The stored outputs must come out of the code on any CPU, not only on the machine that stored them. The cell limit
# is doubled here: PORTABLE_2 runs 3 threads per worker on 2 cores, and lesson 09's training took 254 s of its 300 s
# beside lesson 12 on an idle 2-core Xeon (110 s under make test). The limit catches hangs; speed is not tested here.
PORTABLE_NB := $(PYTEST_NB) --nbval-cell-timeout 600
test-portable: $(STAMP)
	@echo "== nbval under $(PORTABLE_1)"
	$(PORTABLE_1) $(BIN)/python -m pytest lessons solutions $(PORTABLE_NB) -n 2 --dist loadfile --no-loadscope-reorder -q -p no:cacheprovider
	@echo "== nbval under $(PORTABLE_2)"
	$(PORTABLE_2) $(BIN)/python -m pytest lessons solutions $(PORTABLE_NB) -n 2 --dist loadfile --no-loadscope-reorder -q -p no:cacheprovider

# Learners run the course with the PyTorch they have (Colab keeps its own): the lessons' claims must hold across
# the range pyproject.toml states, not only on the pinned CPU wheel. A second environment, .venv-torch-VERSION,
# holds the pinned requirements with another torch release; PyPI serves it as a CUDA build on Linux (several GB, runs
# on the CPU). PIP_CONSTRAINT=/dev/null lifts a machine-wide pip constraint that caps the torch version, if any.
TORCH ?= 2.15.0
TORCH_VENV := .venv-torch-$(TORCH)
test-torch:
	@test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	grep -v '^torch==' requirements.txt > $(TORCH_VENV)/requirements.txt
	PIP_CONSTRAINT=/dev/null $(TORCH_VENV)/bin/python -m pip install --quiet -r $(TORCH_VENV)/requirements.txt \
	    torch==$(TORCH)
	$(TORCH_VENV)/bin/python -m pip install --quiet --no-deps -e .
	@$(TORCH_VENV)/bin/python -c "import torch; print('== nbval with torch', torch.__version__)"
	$(TORCH_VENV)/bin/python -m pytest lessons solutions $(PYTEST_NB) -n 2 --dist loadfile --no-loadscope-reorder -q -p no:cacheprovider

# As root (a container, say) Jupyter refuses to start unless told that this is intended. The course's Lab
# settings (lab-settings/overrides.json5: no news pop-up) apply to this Lab only, not to the user's global
# settings. LAB_DIR and LAB_ARGS let tests/test_lab.py start this same server on a scratch copy.
LAB_DIR ?= exercises/
lab: $(STAMP)
	$(BIN)/jupyter lab $(LAB_DIR) --LabApp.app_settings_dir="$(CURDIR)/lab-settings" \
	    $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

execute: $(STAMP)
	$(BIN)/transformer-course execute lessons solutions

exercises: $(STAMP)
	$(BIN)/transformer-course exercises

bench: $(STAMP)
	$(BIN)/python benchmarks/attention_speed.py
	$(BIN)/python benchmarks/modules_speed.py
	$(BIN)/python benchmarks/kv_cache.py
	$(BIN)/python benchmarks/learning.py
	$(BIN)/python benchmarks/notebooks.py

# Re-pin every package from a fresh environment built from pyproject.toml's ranges.
requirements:
	rm -rf /tmp/tc-pin && $(PYTHON) -m venv /tmp/tc-pin
	/tmp/tc-pin/bin/python -m pip install --quiet --upgrade pip
	/tmp/tc-pin/bin/python -m pip install --quiet -e '.[test]' torch==2.13.0
	{ echo "# Every package, pinned: the exact set that CI tests. Regenerate with 'make requirements'"; \
	  echo "# after changing the dependencies in pyproject.toml (pip freeze of a fresh .venv)."; \
	  /tmp/tc-pin/bin/python -m pip freeze --exclude-editable | sed 's/^torch==\(.*\)+cpu$$/torch==\1/'; \
	} > requirements.txt

clean:
	rm -rf _build .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) src/*.egg-info
