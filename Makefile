# gpu-airgap developer targets. `make test` and `make demo` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# One more worker than CI's 2 CPUs: the third fills the time the others spend waiting on daemons,
# booted nodes and playbooks (whole suite: 254-257 s with 3 against 270-309 s with 2; docs/testing.md).
PYTEST_WORKERS ?= 3
# Units (a file, or the tests sharing a costly fixture) go to the workers longest first: tests/conftest.py.
XDIST  := -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: test check demo lint typecheck pycompat pytest sysdeps venv bench clean debootstrapcache

test: venv sysdeps lint typecheck pycompat pytest

# The fast tier for the edit-test loop (under a minute on 2 CPUs, docs/testing.md): lint, types
# (mypy reuses .mypy_cache) and the tests not marked slow. `make test` once first installs the tools.
check: venv lint typecheck
	$(VENV)/bin/pytest $(XDIST) -m "not slow" -q $(PYTEST_ARGS)

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@rm -f $(VENV)/.installed-*
	@touch $@

sysdeps:
	@bash scripts/install-system-tools

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: venv
	$(VENV)/bin/mypy

# The node side (plumbing/, configure/, installer/) runs on the node's python3 >= 3.9; so do the fleet
# DaemonSet's program and the Ansible role's module.
pycompat: venv
	$(VENV)/bin/vermin --target=3.9- --violations --no-tips --eval-annotations --feature union-types --backport typing plumbing configure installer \
		mirror/fleet/data/k8s-node.py deploy/ansible/collections/ansible_collections/airgap/gpu_airgap/plugins/modules

# Session caches are shared by the workers and built once, under a lock (docs/testing.md).
pytest: venv sysdeps debootstrapcache
	$(VENV)/bin/pytest $(XDIST) $(PYTEST_ARGS)

# The .debs debootstrap --variant=minbase needs, as a local repo for tests/test_node_debootstrap.py
# (apt-get download with the host's apt configuration; seconds, and a no-op once cached).
debootstrapcache: sysdeps
	@bash scripts/prepare-debootstrap-cache

demo: venv sysdeps debootstrapcache
	$(PY) -m tests.demo

# bench_peers.py runs bench_bundle.py's measurements inside its own report, so it is not run twice.
bench: venv sysdeps
	@for b in $(filter-out bench/bench_bundle.py,$(wildcard bench/bench_*.py)); do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info
