# score: the front door.  `make` builds everything, `make test` runs every test,
# `make demo` runs the demo on the virtual cluster, `make bench` the benchmarks.
# Every target installs what it needs first (scripts/install-deps.sh).
#
# Programs land in build/bin, libraries in build/lib:
#   export PATH=$PWD/build/bin:$PATH

BUILD      := $(CURDIR)/build
MESON_DIR  := $(BUILD)/meson
ASAN_DIR   := $(BUILD)/asan
PYTHON     ?= /usr/bin/python3
# The Rust workspace (scored, scrun, scorectl) builds into build/cargo.
CARGO      ?= $(shell command -v cargo 2>/dev/null || echo $(HOME)/.cargo/bin/cargo)
CARGO_DIR  := $(BUILD)/cargo
RUST_BINS  := scored scrun scorectl score-impostor
MESON_OPTS := --prefix=$(BUILD) --bindir=bin --libdir=lib --buildtype=debugoptimized

.PHONY: all deps build asan grafana-schema test test-long demo bench deb clean help

all: build

help:
	@echo "make         build everything into build/bin and build/lib"
	@echo "make test    run every test (unit, sanitizer, fuzz, integration, rust); prints 'N passed, N failed, N skipped'; ALLOW_SKIPS=1 for a partial run"
	@echo "make test-long  the matrices too long for make test (the mpi4py suite in every shape of issue 12; some 15 minutes)"
	@echo "make demo    bring up a virtual cluster and show what score does on it"
	@echo "make bench   run the benchmarks side by side with their baselines"
	@echo "make deb     build the Debian packages into build/deb (lintian-checked) and a local apt repository"
	@echo "make clean   remove build/"

deps:
	@scripts/install-deps.sh

build: deps
	@if [ ! -f $(MESON_DIR)/build.ninja ]; then meson setup $(MESON_DIR) $(MESON_OPTS) >/dev/null; fi
	@ninja -C $(MESON_DIR) >/dev/null || ninja -C $(MESON_DIR)
	@meson install -C $(MESON_DIR) --quiet >/dev/null
	@CARGO_TARGET_DIR=$(CARGO_DIR) $(CARGO) build --quiet --release --locked \
	  --manifest-path scored/Cargo.toml $(addprefix --bin ,$(RUST_BINS))
	@install -m 0755 $(addprefix $(CARGO_DIR)/release/,$(RUST_BINS)) $(BUILD)/bin/
	@echo "built: $(BUILD)/bin $(BUILD)/lib"

# The same C code with AddressSanitizer and UndefinedBehaviorSanitizer; its tests
# run as part of `make test`.
asan: deps
	@if [ ! -f $(ASAN_DIR)/build.ninja ]; then \
	  meson setup $(ASAN_DIR) --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false -Db_lto=false >/dev/null; fi
	@ninja -C $(ASAN_DIR) >/dev/null || ninja -C $(ASAN_DIR)

# Grafana's schema (@grafana/schema) and tsc, pinned by the lock file, for
# the type check of the dashboards (tests/provisioning/test_dashboards.py).
GRAFANA_SCHEMA := $(BUILD)/grafana-schema
GRAFANA_SCHEMA_SRC := tests/provisioning/grafana_schema
grafana-schema: deps $(GRAFANA_SCHEMA)/node_modules/.package-lock.json
$(GRAFANA_SCHEMA)/node_modules/.package-lock.json: $(GRAFANA_SCHEMA_SRC)/package.json $(GRAFANA_SCHEMA_SRC)/package-lock.json
	@mkdir -p $(GRAFANA_SCHEMA)
	@cp $^ $(GRAFANA_SCHEMA)/
	@cd $(GRAFANA_SCHEMA) && npm ci --no-audit --no-fund --loglevel=error

# A full run fails on any skipped test and, as another user than root, before
# it starts.  `make test ALLOW_SKIPS=1` asks for a partial run (docs/testing.md).
test: build asan grafana-schema
	@CARGO=$(CARGO) $(PYTHON) scripts/run-tests --build $(BUILD) \
	  $(if $(filter-out 0,$(ALLOW_SKIPS)),--allow-skips)

# What make test leaves out for its half hour: tests marked long (the
# mpi4py suite in every shape of issue 12, under mpirun, hydra and scrun).
test-long: build
	@SCORE_BUILD=$(BUILD) $(PYTHON) -m pytest -rs -q -m long tests

demo: build
	@scripts/demo.sh

# scripts/bench writes build/bench/*.json, then rewrites the result tables of
# docs/pm/bench.md, docs/pm/bench-udp.md and docs/scored/bench.md from them.
bench: build
	@BENCH_INVOKED_AS="make bench: scripts/bench" $(PYTHON) scripts/bench --build $(BUILD)

# Debian packages of score into build/deb/, a local apt repository of them in
# build/deb/repo/ (docs/admin/packages.md).  DEB_VERSION=V builds version V.
deb: deps
	@scripts/make-deb.sh

clean:
	rm -rf $(BUILD)
