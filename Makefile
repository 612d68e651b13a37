# CubeTemplateCenter — build, test, lint, generate.
SHELL   := /bin/bash
GO      ?= go
BIN     ?= bin
PKGS    ?= ./...
# Two cores: keep package-level parallelism modest so integration suites
# against the shared servers do not starve each other. -count=1: integration
# tests build and run binaries and talk to servers, which the test cache
# cannot see, so their results must never be reused.
TESTFLAGS ?= -p 2 -count=1 -timeout 30m
# --version prints these (apps/internal/version).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/cubesandbox/templatecenter/apps/internal/version.Version=$(VERSION) \
           -X github.com/cubesandbox/templatecenter/apps/internal/version.Commit=$(COMMIT)

.PHONY: all build demo test test-short db-report lint generate docs tools bench fuzz reliability servers servers-stop clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./apps/... ./plugins/...

# demo: cubemaster dev on a fresh data dir, the example image built into a
# template and distributed to the embedded node, its sha256 checked there,
# a summary printed, dev stopped. Offline; needs only Go.
demo: build
	$(GO) run ./internal/tools/demo --bin $(BIN)

# The fault, load and soak suites (internal/systemtest/faults, internal/systemtest/load,
# internal/systemtest/soak) run the binaries make build just made. The packages in
# RACEPKGS, where goroutines share a stream (layer decoding and its gzip
# feeder, Extract's workers) or a callback (the pipeline's events, from the
# download and the builder), run a second time under the race detector,
# which needs a C compiler (cgo): without one that run is skipped, saying so.
RACEPKGS ?= ./adapters/layers ./core/pipeline
test: build tools
	CUBE_TEST_BIN_DIR=$(CURDIR)/$(BIN) $(GO) test $(TESTFLAGS) $(PKGS)
	@if command -v "$$($(GO) env CC)" >/dev/null 2>&1; then \
		echo "$(GO) test -race $(TESTFLAGS) $(RACEPKGS)"; $(GO) test -race $(TESTFLAGS) $(RACEPKGS); \
	else echo "no C compiler ($$($(GO) env CC)): skipping the race detector run of $(RACEPKGS)"; fi

# tools installs what some tests run as external programs (helm, for the
# chart tests), with the Go toolchain only.
tools:
	bash scripts/tools.sh

# docs regenerates docs/configuration.md from apps/config.
docs:
	$(GO) test ./apps/config -run TestConfigurationReference -update

# db-report reruns the store and lock conformance suites and the
# multi-process I1 tests verbosely, keeping one line per database, so a CI
# log shows which databases they ran against.
db-report:
	set -o pipefail; $(GO) test -count=1 -v -run '^(TestConformance|TestMultiProcessI1|TestMultiProcessI1NeedsUniqueKey)$$' \
		./adapters/store/entstore ./adapters/lock/... 2>&1 | grep -E '^(ok |FAIL|(    )?--- )'

# reliability reruns the fault, load and soak suites against the test
# servers (missing servers fail), recording their figures, and regenerates
# the figures section of docs/reliability.md from them. SOAK sets the soak's
# length (CI runs 90s as part of make test).
SOAK ?= 3m
RELIABILITY_OUT ?= $(CURDIR)/.reliability
reliability: build
	rm -rf $(RELIABILITY_OUT)
	CUBE_TEST_REQUIRE_SERVERS=1 CUBE_TEST_BIN_DIR=$(CURDIR)/$(BIN) CUBE_RELIABILITY_OUT=$(RELIABILITY_OUT) CUBE_SOAK_DURATION=$(SOAK) \
		bash -o pipefail -c "$(GO) test -p 1 -count=1 -timeout 60m -v ./internal/systemtest/faults ./internal/systemtest/load ./internal/systemtest/soak | grep -E '^(=== RUN|--- |ok|FAIL|PASS)'"
	$(GO) run ./internal/tools/reliabilitydoc -in $(RELIABILITY_OUT) -doc docs/reliability.md

test-short:
	$(GO) test -short $(PKGS)

lint:
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

generate:
	$(GO) generate ./...

# bench runs the benchmark of internal/tools/bench (see its README): it starts
# MariaDB and a registry on loopback if they are not running, installs
# pigz, igzip (isal) and iproute2 (the links part's namespaces and tc) if
# missing, and prints the table. BENCHFLAGS passes flags to
# cubebench (for example BENCHFLAGS='-rounds 5 -parts builds').
BENCHFLAGS ?=
bench: build
	@command -v pigz >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pigz >/dev/null; }
	@command -v igzip >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq isal >/dev/null; }
	@command -v tc >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null; }
	bash scripts/testservers.sh start mariadb registry >/dev/null
	$(GO) build -o $(BIN)/cubebench ./internal/tools/bench/cmd/cubebench
	set -a && . $${CUBE_TEST_SERVERS_DIR:-/tmp/cube-test-servers}/env && set +a && \
		$(BIN)/cubebench -bin $(BIN) $(BENCHFLAGS)

# fuzz runs each public JSON decoder's fuzz target for FUZZTIME (make test
# replays only their seeds in testdata/fuzz).
FUZZTIME ?= 30s
fuzz:
	@for f in $$($(GO) test -list '^Fuzz' ./adapters/httpapi/cubeapi/ | grep '^Fuzz'); do \
		echo "== $$f"; $(GO) test ./adapters/httpapi/cubeapi/ -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

servers:
	bash scripts/testservers.sh start

servers-stop:
	bash scripts/testservers.sh stop

clean:
	rm -rf $(BIN)
