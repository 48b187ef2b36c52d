# make demo: the bundled example end to end.  make test: lint and the whole suite.  make suite:
# the suite alone (CI runs it on each supported Python: make suite PYTHON=python3.13 VENV=.venv-py313).
# Both create .venv when it is missing and install the project into it; no network beyond PyPI.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
SEMANTIC_STAMP := $(VENV)/.semantic-stamp
# Google ADK's own environment: it requires an OpenTelemetry older than the dev one's frameworks
ADK_VENV ?= .venv-adk
ADK_STAMP := $(ADK_VENV)/.installed-stamp
# CrewAI's own environment: it requires openai, mcp and pydantic older than the dev one's
CREWAI_VENV ?= .venv-crewai
CREWAI_STAMP := $(CREWAI_VENV)/.installed-stamp
# The semantic extra's torch 2.13.0: the CPU build where TORCH_INDEX or a local folder serves
# it (the constraint pins the public version, which PyPI alone resolves too).
TORCH ?= torch==2.13.0
# PyPI serves torch for Linux x86_64 as a CUDA build of several GB; PyTorch's own index serves
# the CPU build: make semantic TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
EXAMPLE := examples/payment_suite.json
# One set of versions known to resolve and pass together (see the file's head).
PIP_INSTALL := $(BIN)/python -m pip install --quiet --disable-pip-version-check -c .ci/constraints.txt
PYTEST := $(BIN)/python -m pytest -q -n 2

.PHONY: demo test suite semantic adk crewai bench proto clean

$(STAMP): pyproject.toml .ci/constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -e '.[dev]'
	@touch $(STAMP)

# Optional: the semantic tier's model (verdictgate[semantic]); its tests are skipped without it.
semantic: $(SEMANTIC_STAMP)

$(SEMANTIC_STAMP): $(STAMP)
	$(PIP_INSTALL) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) '$(TORCH)'
	$(PIP_INSTALL) -e '.[dev,semantic]'
	@touch $(SEMANTIC_STAMP)

# Optional: Google ADK with verdictgate in .venv-adk (verdictgate[google-adk]), for
# tests/test_frameworks_adk.py; its tests are skipped without it (CI makes it).
adk: $(ADK_STAMP)

$(ADK_STAMP): pyproject.toml .ci/constraints-adk.txt
	@test -x $(ADK_VENV)/bin/python || $(PYTHON) -m venv $(ADK_VENV)
	$(ADK_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c .ci/constraints-adk.txt -e '.[google-adk]'
	@touch $(ADK_STAMP)

# Optional: CrewAI with verdictgate in .venv-crewai (verdictgate[crewai]), for
# tests/test_frameworks_crewai.py; its tests are skipped without it (CI makes it).
crewai: $(CREWAI_STAMP)

$(CREWAI_STAMP): pyproject.toml .ci/constraints-crewai.txt
	@test -x $(CREWAI_VENV)/bin/python || $(PYTHON) -m venv $(CREWAI_VENV)
	$(CREWAI_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c .ci/constraints-crewai.txt -e '.[crewai]'
	@touch $(CREWAI_STAMP)

demo: $(STAMP)
	@echo "== 1. plan: what the suite needs before any call"
	$(BIN)/verdictgate plan --suite $(EXAMPLE)
	@echo
	@echo "== 2. a stable router: expect qualified (exit 0)"
	$(BIN)/verdictgate run --agent examples/payment_router.py:stable_router --suite $(EXAMPLE) --isolation fresh-instance
	@echo
	@echo "== 3. a router whose card_security route flips: expect rejected (exit 1)"
	$(BIN)/verdictgate run --agent examples/payment_router.py:flipping_router --suite $(EXAMPLE) --isolation fresh-instance --trials-out demo-report.jsonl; \
	  status=$$?; test $$status -eq 1 || { echo "expected exit 1, got $$status"; exit 1; }
	$(BIN)/verdictgate assess --trials demo-report.jsonl --suite $(EXAMPLE) --format html --output demo-report.html; \
	  test $$? -eq 1
	@echo
	@echo "demo: the stable router qualified; the flipping router was rejected (see its reasons above)."
	@echo "demo: its HTML report, with every route's interval against its tolerance: $(CURDIR)/demo-report.html"

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy
	$(PYTEST)

suite: $(STAMP)
	$(PYTEST)

bench: $(STAMP)
	$(BIN)/python benchmarks/allocator.py
	$(BIN)/python benchmarks/assess.py
	$(BIN)/python benchmarks/http_servers.py
	$(BIN)/python benchmarks/import.py
	$(BIN)/python benchmarks/processor.py
	$(BIN)/python benchmarks/publish_outage.py
	$(BIN)/python benchmarks/receiver.py
	$(BIN)/python benchmarks/receiver_finish.py
	$(BIN)/python benchmarks/receiver_idle.py
	$(BIN)/python benchmarks/receiver_pages.py
	$(BIN)/python benchmarks/semantic.py
	$(BIN)/python benchmarks/sequential_demo.py
	$(BIN)/python benchmarks/sequential_family.py

proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=src --pyi_out=src proto/verdictgate/v1/verdictgate.proto proto/verdictgate/v1/otlp_view.proto

clean:
	rm -rf $(VENV) $(ADK_VENV) $(CREWAI_VENV) .pytest_cache .ruff_cache build src/*.egg-info demo-report.jsonl demo-report.html
