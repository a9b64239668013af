# The make targets are the interface: see README.md.
GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/better-compute/commands/internal/version.Version=$(VERSION)
GOFLAGS_TEST ?= -race -count=1
PKGS      ?= ./...
# The SDK is its own module (sdk/go.mod): `go test ./...` at the root does
# not descend into it, so every target runs it in its own right too.
SDK       := sdk
SDK_PKGS  ?= ./...
# Each module is built and tested on its own, not through go.work: the SDK
# as a vendor sees it (its go.mod and go.sum alone), the root through its
# replace of ./sdk. go.work is for development (editors, ad-hoc go test).
export GOWORK := off

.PHONY: all build plugins test test-go vet proto proto-check bench fmt-check clean

all: build

## build: the daemon, the first-party plugins, the control plane and the CLI into ./bin; the SDK module compiles
build:
	@mkdir -p $(BIN)
	cd $(SDK) && $(GO) build ./...
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./bcd/cmd/... ./controlplane/cmd/...
	@mkdir -p $(BIN)/plugins
	@for p in $$(ls -d plugins/*/cmd/* 2>/dev/null); do \
	  $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/plugins/ ./$$p || exit 1; done

## test: vet, then the whole suite with -race (the repository's module against a throwaway PostgreSQL, then the SDK's module)
test: fmt-check vet proto-check
	scripts/with-postgres $(GO) test $(GOFLAGS_TEST) $(PKGS)
	cd $(SDK) && $(GO) test $(GOFLAGS_TEST) $(SDK_PKGS)

## test-sdk: the SDK module's tests alone (no PostgreSQL needed)
.PHONY: test-sdk
test-sdk:
	cd $(SDK) && $(GO) test $(GOFLAGS_TEST) $(SDK_PKGS)

vet:
	$(GO) vet ./...
	cd $(SDK) && $(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## proto: regenerate the protobuf code with the pinned buf and plugins
proto:
	$(GO) tool buf lint
	$(GO) tool buf generate

## proto-check: fail when the committed generated code is stale (both buf modules)
PROTO_DIRS := proto sdk/proto
proto-check:
	@rm -rf .cache/proto-check
	@$(GO) tool buf generate --template buf.gen.yaml -o .cache/proto-check >/dev/null 2>&1 || \
	  { echo "buf generate failed: run 'make proto' to see why"; exit 1; }
	@for d in $(PROTO_DIRS); do \
	  diff -r -q --exclude='*.proto' .cache/proto-check/$$d $$d >/dev/null 2>&1 || \
	  { diff -r --exclude='*.proto' .cache/proto-check/$$d $$d | head -20; echo "generated protobuf code is stale: run 'make proto' and commit"; rm -rf .cache/proto-check; exit 1; }; \
	done
	@rm -rf .cache/proto-check

## docs: regenerate the kind reference (docs/reference/kinds.md) from the manifests
.PHONY: docs docs-check
docs:
	$(GO) run ./internal/tools/kinddoc -o docs/reference/kinds.md

## docs-check: fail when the committed kind reference is stale
docs-check:
	@$(GO) run ./internal/tools/kinddoc -o .cache/docs-check/kinds.md || \
	  { echo "kinddoc failed: run 'make docs' to see why"; exit 1; }
	@cmp -s .cache/docs-check/kinds.md docs/reference/kinds.md || \
	  { diff -u docs/reference/kinds.md .cache/docs-check/kinds.md | head -20; echo "docs/reference/kinds.md is stale: run 'make docs' and commit it"; rm -rf .cache/docs-check; exit 1; }
	@rm -rf .cache/docs-check

## bench: benchmarks, each beside a floor measured in the same run
bench:
	scripts/with-postgres $(GO) test -run '^$$' -bench . -benchtime 2000x $(PKGS)
	cd $(SDK) && $(GO) test -run '^$$' -bench . -benchtime 2000x $(SDK_PKGS)

.PHONY: packages check-packages
## packages: bcd's and bc-server's .deb and .rpm into dist/ (nfpm, pinned in go.mod)
packages:
	VERSION=$(VERSION) GO=$(GO) scripts/build-packages

## check-packages: lintian, rpm -qpl, systemd-analyze verify, and a real dpkg -i/purge (root) of dist/
check-packages: packages
	scripts/check-packages

clean:
	rm -rf $(BIN) dist .cache

.PHONY: run
## run: the same as demo: the whole system on one machine, commands run through it, everything stopped after
run: demo

.PHONY: demo
## demo: a newcomer's tour: a throwaway PostgreSQL, bc-server, a healthy and a faulty bcd node on mock GPUs, diagnostics, a support bundle, a cancelled command, a summary; everything stopped after (DEMO_FLAGS=--json for JSON)
demo: build
	BIN=$(BIN) scripts/demo $(DEMO_FLAGS)
