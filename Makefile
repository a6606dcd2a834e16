# Two commands on a fresh machine: `make demo` and `make test` (each sets up first).
#
# Set-up makes a virtualenv that can see the system's packages, so a torch already installed (a CUDA
# build, say) is used as it is. Only where no torch is importable does it install TORCH_SPEC, before the
# kit itself, so pip never resolves the kit's `torch>=2.4` to a multi-GB CUDA build.

PYTHON      ?= python3
VENV        ?= .venv
TORCH_SPEC  ?= torch==2.13.0
# e.g. TORCH_PIP_ARGS="--index-url <your CPU wheel index>" where PyPI's default build is not wanted
TORCH_PIP_ARGS ?=
PY          := $(VENV)/bin/python
TW          := $(VENV)/bin/trainwreck

.PHONY: setup native bubblewrap browser demo test test-fast lint docs docs-check verify variants variants-ci validity validity-ci ci bench clean adversarial selfcheck

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -c "import torch, sys; print(f'torch {torch.__version__} (cuda: {torch.cuda.is_available()})', file=sys.stderr)"
	touch $@

setup: $(VENV)/.installed bubblewrap native

# The collective trace's C++ kernel, for this torch (harness/native_build.py; about 15 s, once per
# torch version and source change). Without a compiler, runs trace collectives with the Python
# kernel instead, which costs more per collective: set-up says so and goes on.
native: $(VENV)/.installed
	@$(PY) -m harness.native_build || true

# bubblewrap, the sandbox every grading runs a candidate's code in (Debian's package; installed only
# when missing, and only where apt-get exists: elsewhere grading refuses with the fix, or runs
# unisolated with --no-sandbox, and says so).
bubblewrap:
	@command -v bwrap >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } || \
		echo "bubblewrap could not be installed: grading refuses to run without it (apt-get install bubblewrap, or grade with --no-sandbox)" >&2

demo: setup
	$(TW) demo

# Headless Chromium for the debrief report's browser test (Debian's package; installed only when
# missing, and only where apt-get exists: elsewhere that test skips and says why).
browser:
	@command -v chromium >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		echo "chromium could not be installed: the report's browser test will skip" >&2

# Every test, spread over the machine's cores (pytest-xdist: two workers took a fresh clone's run on
# the 2-core machine from 23 min to 15, benchmarks/README.md); the 25 slowest are listed at the end.
test: setup browser
	$(PY) -m pytest -n auto --durations=25

# the tests that start no processes of their own, spread over the machine's cores (pytest-xdist)
test-fast: setup
	$(PY) -m pytest -m "not slow" -q -n auto

# The candidate bundle's self-check both ways for every script exercise (tests/grader/bundle/test_selfcheck.py):
# about 17 minutes; `make test` runs two of the ten.
selfcheck: setup
	TRAINWRECK_SELFCHECK_ALL=1 $(PY) -m pytest tests/grader/bundle/test_selfcheck.py

# ruff, then the type checker over grader/ and harness/ ([tool.mypy] in pyproject.toml: strict for the
# modules listed there; about a minute cold on the 2-core machine, seconds with its cache)
lint: setup
	$(VENV)/bin/ruff check .
	$(PY) -m mypy

# docs/cli.md from the commands' real --help; docs-check fails when the committed file has drifted
docs: setup
	$(PY) -m grader.clidoc

docs-check: setup
	$(PY) -m grader.clidoc --check

verify: setup
	$(TW) verify

# The variant corpus (tests/variants/README.md): fixes in other styles, symptom patches and cheats, each
# graded and compared with its expected verdict. variants-ci is CI's tier (ci = true in variant.toml).
variants: setup
	$(TW) verify --variants

variants-ci: setup
	$(TW) verify --variants --ci

# The generated validity suite (tests/validity/README.md): every semantics-preserving rewrite of each reference
# fix must pass, every property-breaking mutation must fail for the reason its config names. validity grades all
# of it (hours on a 2-core machine; VALIDITY="sampler-replay memory-leak" for some exercises) and publishes the
# run into docs/validity.json and docs/validity.md, whatever it found. validity-ci is CI's tier (ci = true).
VALIDITY ?=
VALIDITY_OUT ?= .trainwreck/validity/last
validity: setup
	rm -rf $(VALIDITY_OUT)
	$(TW) verify --validity $(VALIDITY) --out $(VALIDITY_OUT); rc=$$?; \
		$(PY) -m grader.validity.table merge $(VALIDITY_OUT)/validity.json && exit $$rc

validity-ci: setup
	$(TW) verify --validity --ci

ci: lint docs-check test verify variants-ci validity-ci adversarial-ci

bench: setup
	$(PY) benchmarks/harness_overhead.py
	$(PY) benchmarks/grading.py

# The hostile-submission suite (issue 11, tests/adversarial/README.md): about an hour, every case a hostile
# grading and an honest one. ADV="-k hang" runs one class, ADV="-k fifo-checkpoint" one case. ADV_UNISOLATED=1
# also runs, contained, the cases that need the sandbox while grading has none (to measure what gets through).
ADV ?=
ADV_UNISOLATED ?=
adversarial: setup
	TRAINWRECK_ADVERSARIAL=1 TRAINWRECK_ADVERSARIAL_UNISOLATED=$(ADV_UNISOLATED) $(PY) -m pytest tests/adversarial $(ADV); \
		rc=$$?; $(PY) -m tests.adversarial.figures; exit $$rc

# CI's tier of it: one case per defence that only a real grading proves (cases.py ci=True; about 3 minutes)
adversarial-ci: setup
	TRAINWRECK_ADVERSARIAL=1 $(PY) -m pytest tests/adversarial -m adversarial_ci

clean:
	rm -rf $(VENV) runs .trainwreck .pytest_cache harness/native/build
