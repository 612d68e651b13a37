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

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./internal/bench/... ./adapters/...

servers:
	bash scripts/testservers.sh start

servers-stop:
	bash scripts/testservers.sh stop

clean:
	rm -rf $(BIN)
