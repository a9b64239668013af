# The make targets are the interface: see README.md.
GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/better-compute/commands/internal/version.Version=$(VERSION)
GOFLAGS_TEST ?= -race -count=1
PKGS      ?= ./...

.PHONY: all build plugins test test-go vet proto proto-check bench fmt-check clean

all: build

## build: the daemon, the first-party plugins, the control plane and the CLI into ./bin
build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./bcd/cmd/... ./controlplane/cmd/...
	@mkdir -p $(BIN)/plugins
	@for p in $$(ls -d plugins/*/cmd/* 2>/dev/null); do \
	  $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/plugins/ ./$$p || exit 1; done

## test: vet, then the whole suite with -race, against a throwaway PostgreSQL
test: vet proto-check
	scripts/with-postgres $(GO) test $(GOFLAGS_TEST) $(PKGS)

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## proto: regenerate the protobuf code with the pinned buf and plugins
proto:
	$(GO) tool buf lint
	$(GO) tool buf generate

## proto-check: fail when the committed generated code is stale
proto-check:
	@$(GO) tool buf generate --template buf.gen.yaml -o .cache/proto-check >/dev/null 2>&1 || \
	  { echo "buf generate failed: run 'make proto' to see why"; exit 1; }
	@diff -r -q --exclude='*.proto' .cache/proto-check/proto proto >/dev/null 2>&1 || \
	  { diff -r --exclude='*.proto' .cache/proto-check/proto proto | head -20; echo "generated protobuf code is stale: run 'make proto' and commit"; rm -rf .cache/proto-check; exit 1; }
	@rm -rf .cache/proto-check

## bench: benchmarks, each beside a floor measured in the same run
bench:
	scripts/with-postgres $(GO) test -run '^$$' -bench . -benchtime 2000x $(PKGS)

clean:
	rm -rf $(BIN) dist .cache
