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

.PHONY: all build test test-short db-report lint generate bench servers servers-stop clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./apps/... ./plugins/...

test: build
	$(GO) test $(TESTFLAGS) $(PKGS)

# db-report reruns the store and lock conformance suites and the
# multi-process I1 tests verbosely, keeping one line per database, so a CI
# log shows which databases they ran against.
db-report:
	set -o pipefail; $(GO) test -count=1 -v -run '^(TestConformance|TestMultiProcessI1|TestMultiProcessI1NeedsUniqueKey)$$' \
		./adapters/store/entstore ./adapters/lock/... 2>&1 | grep -E '^(ok |FAIL|(    )?--- )'

test-short:
	$(GO) test -short $(PKGS)

lint:
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

generate:
	$(GO) generate ./...

# bench runs the benchmark of internal/bench (see its README): it starts
# MariaDB and a registry on loopback if they are not running, installs
# pigz if missing, and prints the table. BENCHFLAGS passes flags to
# cubebench (for example BENCHFLAGS='-rounds 5 -parts builds').
BENCHFLAGS ?=
bench: build
	@command -v pigz >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pigz >/dev/null; }
	bash scripts/testservers.sh start mariadb registry >/dev/null
	$(GO) build -o $(BIN)/cubebench ./internal/bench/cmd/cubebench
	set -a && . $${CUBE_TEST_SERVERS_DIR:-/tmp/cube-test-servers}/env && set +a && \
		$(BIN)/cubebench -bin $(BIN) $(BENCHFLAGS)

servers:
	bash scripts/testservers.sh start

servers-stop:
	bash scripts/testservers.sh stop

clean:
	rm -rf $(BIN)
