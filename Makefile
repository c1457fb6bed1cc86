# countersign — `make run` runs the local stack, `make test` runs the tests. Both install what they need.
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Chromium is optional (the browser test skips without it): its own stamp, touched only once it is
# there, so a failed install (apt's lock held by another apt-get on a shared machine, no root) is
# tried again by the next `make`. `apt-get install` waits up to 120 s for dpkg's lock rather than failing
# at once (`apt-get update` has no such wait for the lists' lock: there, the next `make` is the retry).
BROWSER := $(VENV)/.chromium
APT_GET := apt-get -q -o DPkg::Lock::Timeout=120

.PHONY: install run test lint format clean example-decorator example-langgraph example-openai-agents bench-install bench-intake bench-latency bench-pause bench-langgraph bench-floor \
	bench-channel bench-chaos bench-durability

$(STAMP): pyproject.toml
	command -v redis-server >/dev/null || { $(APT_GET) update && $(APT_GET) install -y redis-server; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

$(BROWSER): | $(STAMP)
	@{ command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ $(APT_GET) update && $(APT_GET) install -y chromium chromium-driver; }; } && touch $(BROWSER) || \
		echo "chromium could not be installed: tests/test_browser.py will be skipped; the next make tries again"

install: $(STAMP) $(BROWSER)

run: install
	$(BIN)/countersign run

test: install
	$(BIN)/ruff check countersign tests examples bench
	$(BIN)/ruff format --check countersign tests examples bench
	$(BIN)/mypy
	$(BIN)/pytest

# The integrations' examples (README, "Agent frameworks"): each asks for a refund on the stack `make run`
# started (in another terminal), approves its card in the sandbox as lee.lead, and prints the refund run.
example-decorator: install
	$(BIN)/python -m examples.decorator_refund 120.00 --approve

example-langgraph: install
	$(BIN)/python -m examples.langgraph_refund 120.00 --approve

example-openai-agents: install
	$(BIN)/python -m examples.openai_agents_refund 120.00 --approve

lint: install
	$(BIN)/ruff check countersign tests examples bench
	$(BIN)/ruff format --check countersign tests examples bench
	$(BIN)/mypy

format: install
	$(BIN)/ruff format countersign tests examples bench
	$(BIN)/ruff check --fix countersign tests examples bench

# Benchmarks (BENCHMARKS.md): each installs the `bench` extra, then prints one table. BENCH_DB is the
# PostgreSQL server a scratch database is created on (and dropped) for the run.
BENCH_STAMP := $(VENV)/.bench-installed
BENCH_DB    ?= postgresql://postgres@127.0.0.1:5432/test

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench-install: $(BENCH_STAMP)

bench-intake: bench-install
	$(BIN)/python bench/intake_throughput.py --database-url $(BENCH_DB)

bench-latency: bench-install
	$(BIN)/python bench/decision_latency.py --database-url $(BENCH_DB)

bench-pause: bench-install
	$(BIN)/python bench/pause_cost.py --database-url $(BENCH_DB)

bench-langgraph: bench-install
	$(BIN)/python bench/pause_vs_langgraph.py --database-url $(BENCH_DB)

bench-floor: bench-install
	$(BIN)/python bench/cycle_floor.py --database-url $(BENCH_DB)

bench-channel: bench-install
	$(BIN)/python bench/busy_channel.py --database-url $(BENCH_DB)

bench-durability: bench-install
	$(BIN)/python bench/durability_cost.py --database-url $(BENCH_DB)

bench-chaos: bench-install
	$(BIN)/python bench/chaos.py --requests 300 --kills 12

clean:
	rm -rf $(VENV) countersign.egg-info .pytest_cache .ruff_cache
