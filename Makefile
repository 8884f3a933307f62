# Two commands set everything up on a fresh machine: `make run` and `make test`.
## The venv's interpreter: the distribution's own python3 where it is 3.11 or newer and can make
## a venv, else python3 on PATH (`make PYTHON=...` names another; an existing .venv is kept).
## Debian builds its python3 as one static executable with profile-guided and link-time
## optimisation; pyenv's default build (a shared libpython, neither) spends more CPU on the same
## Python: a fork server's warm-up (OpenAI level) 1.28-1.32 s against 1.06-1.28 s, the suite
## 389-398 s of CPU against 373-383 s (alternated runs, every process it started).
PYTHON ?= $(shell /usr/bin/python3 -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' \
  2>/dev/null && echo /usr/bin/python3 || echo python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
AGENTS_STAMP := ops/agents/node_modules/.installed-stamp

.PHONY: run status ticks tick serve test browser lint bench clean

## uv installs what pip would (the same versions, checked here), in 8 s where pip took 41 s
## with empty caches: the set-up every clean clone and CI pays before its first test. uv does
## not read pip's configuration: where only an index named there is reachable, pip installs.
## Both compile the bytecode as they install (pip does by default, uv when asked), and so is
## tickwork's own source: otherwise the suite's first interpreters each compile what they
## import, four xdist workers racing over the same modules (a cold collection took 13.7 s of
## CPU, a compiled one 8.6 s; compiling the venv takes 8.5 s of wall on two cores).
$(STAMP): pyproject.toml ops/install-excludes.txt $(AGENTS_STAMP)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet 'uv>=0.13,<1'
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python \
	  --excludes ops/install-excludes.txt -e '.[dev]' || \
	  $(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q -j 0 harness workers migrations
	touch $(STAMP)

## The agent CLIs (`agent = "claude-code" | "opencode"`), pinned in ops/agents/package-lock.json,
## installed into ops/agents/node_modules (never globally); `tickwork doctor` lists them.
$(AGENTS_STAMP): ops/agents/package.json ops/agents/package-lock.json ops/agents/opencode-config/package-lock.json
	npm ci --prefix ops/agents --no-audit --no-fund --loglevel=error
	npm ci --prefix ops/agents/opencode-config --no-audit --no-fund --loglevel=error
	touch $(AGENTS_STAMP)

## Run tickwork on its embedded defaults, in the foreground: SQLite store under ./.tickwork/,
## the `min` and `hour` levels, tickwork's own fake upstream unless OPENAI_BASE_URL is set.
run: $(STAMP)
	test -f tickwork.toml || $(BIN)/tickwork init
	$(BIN)/tickwork status
	$(BIN)/tickwork run

## The commands of a first hour, without activating the venv (`. .venv/bin/activate`
## puts `tickwork` itself on PATH): `make tick LEVEL=hour` runs one tick of that level.
LEVEL ?= min

status: $(STAMP)
	$(BIN)/tickwork status

ticks: $(STAMP)
	$(BIN)/tickwork ticks

tick: $(STAMP)
	$(BIN)/tickwork tick $(LEVEL)

serve: $(STAMP)
	$(BIN)/tickwork serve

## The whole test suite (PostgreSQL tests need a server at $$TICKWORK_TEST_PG_URL or 127.0.0.1:5432;
## the dashboard test drives Debian's headless Chromium, installed here when it is missing).
## Five workers on two cores: most tests wait on subprocesses, deadlines and the network, and
## the cores idle when every worker waits at once. Alternated (Debian's Python, 1,365 tests):
## five ended at 93-94 % of the least wall their work allows (227.2 and 218.8 s), four at 84-86 %
## (242.9 and 232.4 s) for ~3 % less CPU. Worksteal keeps the long tests apart.
## Bytecode is written even where the shell sets PYTHONDONTWRITEBYTECODE: the suite starts
## hundreds of interpreters (services, fork servers, ticks, commands), and each one compiled
## every tickwork module it imported from source, as each worker did every test module.
test: $(STAMP) browser
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n 5 --dist worksteal --durations=25

browser:
	test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; }

lint: $(STAMP)
	$(BIN)/ruff check harness workers migrations tests ops
	$(BIN)/ruff format --check harness workers migrations tests ops
	$(BIN)/mypy harness workers

bench: $(STAMP)
	$(BIN)/python ops/bench/store_bench.py
	$(BIN)/python ops/bench/tick_bench.py
	$(BIN)/python ops/bench/scheduler_bench.py
	$(BIN)/python ops/bench/cli_startup.py
	$(BIN)/python ops/bench/governor_bench.py
	$(BIN)/python ops/bench/kill_bench.py
	$(BIN)/python ops/bench/procrastinate_bench.py

clean:
	rm -rf $(VENV) .tickwork .pytest_cache .mypy_cache .ruff_cache
