# The make targets are the interface: see README.md.
GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/better-compute/commands/internal/version.Version=$(VERSION)
# -timeout: the e2e package runs bc-server, bcds and fleets for many minutes
# under -race on two cores; go test's default of 10 minutes a package is
# not a bound on anything we promise.
GOFLAGS_TEST ?= -race -count=1 -timeout 45m
PKGS      ?= ./...
# The SDK is its own module (sdk/go.mod): `go test ./...` at the root does
# not descend into it, so every target runs it in its own right too.
SDK       := sdk
SDK_PKGS  ?= ./...
# Each module is built and tested on its own, not through go.work: the SDK
# as a vendor sees it (its go.mod and go.sum alone), the root through its
# replace of ./sdk. go.work is for development (editors, ad-hoc go test).
export GOWORK := off
# The pinned tools (buf, protoc-gen-go, protoc-gen-go-grpc, nfpm, apidiff)
# are a module of their own, tools/go.mod, run with go tool -modfile: kept
# out of the root module's graph, whose `go list -m all` (what go doc runs
# first) would otherwise need the go.mod of every module buf's tree names.
TOOL      := $(GO) tool -modfile=tools/go.mod

# go-nvml's cgo wrappers call NVML functions that its own nvml.h marks
# deprecated, and gcc warns about each one: about 145 lines on a cold build,
# before anything else, though nothing is wrong. Only that warning is turned
# off (errors and every other warning still print); scripts/lib/go-env.sh
# does the same for the scripts that build. cgo-warnings-check proves it.
CGO_CFLAGS ?= -g -O2
ifeq ($(filter -Wno-deprecated-declarations,$(CGO_CFLAGS)),)
CGO_CFLAGS += -Wno-deprecated-declarations
endif
export CGO_CFLAGS

.PHONY: all build plugins test test-go vet proto proto-check bench fmt-check clean cgo-warnings-check

all: build

## build: the daemon, the first-party plugins, the control plane and the CLI into ./bin; the SDK module compiles
build:
	@mkdir -p $(BIN)
	cd $(SDK) && $(GO) build ./...
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./bcd/cmd/... ./controlplane/cmd/...
	@mkdir -p $(BIN)/plugins
	@for p in $$(ls -d plugins/*/cmd/* 2>/dev/null); do \
	  $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/plugins/ ./$$p || exit 1; done

## lint: staticcheck, golangci-lint (.golangci.yml) and govulncheck on both modules, and buf breaking against the last release's protos (make proto-breaking); the linters are pinned and installed once into $(LINT_BIN)
# Pinned linters, from the Go module proxy. Each is installed once into a
# directory named by its version, so a machine that has it skips the build
# (golangci-lint takes minutes on two cores) and a version bump rebuilds.
STATICCHECK_VERSION   := v0.8.2
GOLANGCI_LINT_VERSION := v2.15.0
GOVULNCHECK_VERSION   := v1.9.0
# govulncheck's database: vuln.go.dev is not reachable from CI, so the
# database is built from the golang.org/x/vulndb module (its OSV entries,
# through its own indexdb) as of this version; bump it to see newer entries.
VULNDB_VERSION        := v0.0.0-20261105234957-e22db6528018
LINT_BIN ?= $(HOME)/go/bin/bc-lint
STATICCHECK   := $(LINT_BIN)/staticcheck-$(STATICCHECK_VERSION)/staticcheck
GOLANGCI_LINT := $(LINT_BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint
GOVULNCHECK   := $(LINT_BIN)/govulncheck-$(GOVULNCHECK_VERSION)/govulncheck
INDEXDB       := $(LINT_BIN)/indexdb-$(VULNDB_VERSION)/indexdb
VULNDB_DIR    := .cache/vulndb-$(VULNDB_VERSION)

$(STATICCHECK):
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
$(GOLANGCI_LINT):
	GOBIN=$(dir $@) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
$(GOVULNCHECK):
	GOBIN=$(dir $@) $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)
$(INDEXDB):
	GOBIN=$(dir $@) GOFLAGS=-mod=mod $(GO) install golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION)
$(VULNDB_DIR)/index/db.json: | $(INDEXDB)
	@rm -rf $(VULNDB_DIR)
	$(INDEXDB) -vulns "$$($(GO) mod download -json golang.org/x/vulndb@$(VULNDB_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p')/data/osv" -out $(VULNDB_DIR)

.PHONY: lint lint-tools
lint-tools: $(STATICCHECK) $(GOLANGCI_LINT) $(GOVULNCHECK) $(VULNDB_DIR)/index/db.json

lint: lint-tools proto-breaking
	$(STATICCHECK) ./...
	cd $(SDK) && $(STATICCHECK) ./...
	$(GOLANGCI_LINT) run ./...
	cd $(SDK) && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...
	@echo "govulncheck: database golang.org/x/vulndb@$(VULNDB_VERSION) (offline; vuln.go.dev is not reachable from CI)"
	@$(GOVULNCHECK) -db file://$(CURDIR)/$(VULNDB_DIR) -format json ./... > .cache/govulncheck.json
	@$(GO) run ./internal/tools/vulngate .ci/govulncheck-accepted < .cache/govulncheck.json
	@cd $(SDK) && $(GOVULNCHECK) -db file://$(CURDIR)/$(VULNDB_DIR) -format json ./... > ../.cache/govulncheck-sdk.json
	@$(GO) run ./internal/tools/vulngate .ci/govulncheck-accepted < .cache/govulncheck-sdk.json

## deps-test, deps-demo: install what make test and make demo need beside Go
## and gcc (PostgreSQL's pg_virtualenv, dbus-daemon) with apt-get as root, or
## print the command that does
.PHONY: deps-test deps-demo
deps-test:
	@scripts/install-deps test
deps-demo:
	@scripts/install-deps demo

## test: vet, then the whole suite with -race (the repository's module against a throwaway PostgreSQL, then the SDK's module)
test: deps-test fmt-check vet proto-check sdk-api-check console-check cgo-warnings-check
	scripts/with-postgres $(GO) test $(GOFLAGS_TEST) $(PKGS)
	cd $(SDK) && $(GO) test $(GOFLAGS_TEST) $(SDK_PKGS)
	$(MAKE) test-ts

## ts-deps: the TypeScript client's npm packages from its lockfile (npm ci in sdk/typescript; make test and test-ts get them through scripts/install-deps test, when missing or stale)
.PHONY: ts-deps test-ts
TS := sdk/typescript
ts-deps:
	cd $(TS) && npm ci --no-audit --no-fund

## test-ts: the TypeScript client's Node tests (the spec's snippets, verbatim) and the console's browser tests (headless Chromium, playwright-core; screenshots in sdk/typescript/screenshots/) against a real bc-server with bcd nodes on mock GPUs and a throwaway PostgreSQL
test-ts: deps-test build demo-tools
	BIN=$(BIN) scripts/with-postgres scripts/test-ts

## console: build the web console (controlplane/console/src) with the pinned esbuild into controlplane/console/dist, which bc-server embeds; commit it
.PHONY: console console-check
console:
	@test -x $(TS)/node_modules/.bin/esbuild || { echo "$(TS)/node_modules is missing: run make ts-deps"; exit 1; }
	cd $(TS) && npm run --silent console

## console-check: fail when the committed console build is stale
console-check:
	@test -x $(TS)/node_modules/.bin/esbuild || { echo "$(TS)/node_modules is missing: run make ts-deps"; exit 1; }
	@rm -rf .cache/console-check
	@cd $(TS) && npm run --silent console -- ../../.cache/console-check || { echo "the console does not build: run make console to see why"; exit 1; }
	@diff -r -q .cache/console-check controlplane/console/dist >/dev/null || \
	  { diff -r -q .cache/console-check controlplane/console/dist | head; echo "controlplane/console/dist is stale: run 'make console' and commit it"; rm -rf .cache/console-check; exit 1; }
	@rm -rf .cache/console-check

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

## cgo-warnings-check: fail when compiling go-nvml with the build's CGO_CFLAGS
## prints anything (a cold build's deprecation warnings). The -D that only this
## check passes makes go-nvml's cgo compile again, as on a cold cache, without
## rebuilding the rest.
cgo-warnings-check:
	@out=$$(CGO_CFLAGS="$(CGO_CFLAGS) -DBC_CGO_WARNINGS_CHECK=$$$$" $(GO) build github.com/NVIDIA/go-nvml/pkg/nvml 2>&1) || \
	  { echo "$$out"; echo "go-nvml does not build"; exit 1; }; \
	  if [ -n "$$out" ]; then echo "$$out" | head -20; echo "a cold build of go-nvml prints $$(echo "$$out" | wc -l) lines: CGO_CFLAGS ($(CGO_CFLAGS)) no longer silences them"; exit 1; fi

## proto: regenerate the protobuf code with the pinned buf and plugins
proto:
	$(TOOL) buf lint
	$(TOOL) buf generate
	$(TOOL) buf generate --template buf.gen.ts.yaml --path proto/bc/api/v1

## proto-baseline: the release procedure's step: write buf.baseline.binpb, the buf image of the protos (both modules) at BASELINE_REF, the release's commit, which proto-breaking checks every later change against; commit it with the release
# There is no release tag yet: the baseline is a3bbfb5, the last commit
# before agentv1.TrustBundle dropped command_signing_roots and
# approver_keys (the protos out-of-tree Go code was written against).
BASELINE_REF ?= a3bbfb54aa815efae6eb2adeef7b0501b5f6fcba
.PHONY: proto-baseline proto-breaking
proto-baseline:
	@rm -rf .cache/proto-baseline && mkdir -p .cache/proto-baseline
	git archive $(BASELINE_REF) buf.yaml proto sdk/proto | tar -x -C .cache/proto-baseline
	$(TOOL) buf build .cache/proto-baseline -o buf.baseline.binpb
	@rm -rf .cache/proto-baseline

## proto-breaking: buf breaking (FILE rules, buf.yaml) of the protos against buf.baseline.binpb, the last release's: a removed or renumbered field, a renamed message or RPC fails it
proto-breaking:
	@mkdir -p .cache
	@$(TOOL) buf build . -o .cache/proto-current.binpb
	$(TOOL) buf breaking .cache/proto-current.binpb --against buf.baseline.binpb --exclude-imports

## proto-check: fail when the committed generated code is stale (both buf modules, and the TypeScript client's sdk/typescript/src/gen)
PROTO_DIRS := proto sdk/proto
proto-check:
	@rm -rf .cache/proto-check
	@$(TOOL) buf generate --template buf.gen.yaml -o .cache/proto-check >/dev/null 2>&1 || \
	  { echo "buf generate failed: run 'make proto' to see why"; exit 1; }
	@for d in $(PROTO_DIRS); do \
	  diff -r -q --exclude='*.proto' .cache/proto-check/$$d $$d >/dev/null 2>&1 || \
	  { diff -r --exclude='*.proto' .cache/proto-check/$$d $$d | head -20; echo "generated protobuf code is stale: run 'make proto' and commit"; rm -rf .cache/proto-check; exit 1; }; \
	done
	@test -x $(TS)/node_modules/.bin/protoc-gen-es || { echo "$(TS)/node_modules is missing: run make ts-deps"; exit 1; }
	@$(TOOL) buf generate --template buf.gen.ts.yaml --path proto/bc/api/v1 -o .cache/proto-check >/dev/null 2>&1 || \
	  { echo "buf generate (TypeScript) failed: run 'make proto' to see why"; exit 1; }
	@diff -r -q .cache/proto-check/$(TS)/src/gen $(TS)/src/gen >/dev/null 2>&1 || \
	  { diff -r .cache/proto-check/$(TS)/src/gen $(TS)/src/gen | head -20; echo "generated TypeScript code is stale: run 'make proto' and commit"; rm -rf .cache/proto-check; exit 1; }
	@rm -rf .cache/proto-check

## sdk-api: write the SDK's exported API as of kind.SDKVersion (apidiff's export data, internal/tools/sdkapi/baseline/) when sdk/vX.Y.Z is tagged; commit it (docs/sdk-guide.md, "Releasing the SDK")
.PHONY: sdk-api sdk-api-check
sdk-api:
	$(GO) run ./internal/tools/sdkapi write

## sdk-api-check: fail when the SDK's API breaks its last release without a new major in kind.SDKVersion, or grows without a new minor (apidiff, pinned in tools/go.mod, against the committed baseline; about 3 s)
sdk-api-check:
	@$(GO) run ./internal/tools/sdkapi check

## docs: regenerate the kind reference (docs/reference/kinds.md) from the manifests
.PHONY: docs docs-check
docs:
	$(GO) run ./internal/tools/kinddoc -o docs/reference/kinds.md
	$(GO) run ./internal/tools/archdiagram -w docs/architecture.md

## docs-check: fail when the committed kind reference is stale
docs-check:
	@$(GO) run ./internal/tools/kinddoc -o .cache/docs-check/kinds.md || \
	  { echo "kinddoc failed: run 'make docs' to see why"; exit 1; }
	@cmp -s .cache/docs-check/kinds.md docs/reference/kinds.md || \
	  { diff -u docs/reference/kinds.md .cache/docs-check/kinds.md | head -20; echo "docs/reference/kinds.md is stale: run 'make docs' and commit it"; rm -rf .cache/docs-check; exit 1; }
	@rm -rf .cache/docs-check

## bench: benchmarks, each beside a floor measured in the same run (BenchmarkSessions runs bc-sim fleets of 1,000, 10,000 and 30,000 nodes; BC_SIM_NODES=N runs one size, BC_SIM_FANOUTS=N that many fan-outs; BC_BENCH_CPUPROFILE=dir profiles its workload, gateway and bc-sim, and writes the gateway's allocation profiles; BC_BENCH_GATEWAY_LOG=path keeps the gateway's log)
bench:
	scripts/with-postgres $(GO) test -run '^$$' -bench . -benchtime 2000x -timeout 60m $(PKGS)
	cd $(SDK) && $(GO) test -run '^$$' -bench . -benchtime 2000x $(SDK_PKGS)

.PHONY: ha-test
## ha-test: bc-server on a pg_auto_failover formation (monitor, primary, synchronous standby on loopback; installs postgresql-15-auto-failover as root), bcd nodes under commands.run load, the primary killed; prints acknowledged, present, lost (docs/operator-guide.md, "PostgreSQL failover")
ha-test:
	GO=$(GO) scripts/ha-test

.PHONY: check-rules
## check-rules: promtool check rules and promtool test rules over the alert rules the packages install (installs promtool, Debian's prometheus package, when missing as root)
check-rules:
	scripts/check-rules

.PHONY: packages check-packages
## packages: bcd's and bc-server's .deb and .rpm into dist/ (nfpm, pinned in go.mod)
packages:
	VERSION=$(VERSION) GO=$(GO) scripts/build-packages

## release-package: the daemon.upgrade release package dist/bcd-VERSION-ARCH.tar.gz (bcd, bcd-upgrader, plugins/, plugin-sha256.json: a version directory); RELEASE_KEY=release.pem also signs it (pki sign-release) into dist/bcd-VERSION-ARCH.release.json, ALLOW_DOWNGRADE=yes for a downgrade; STAGE=dist/stage packages what make packages built
.PHONY: release-package
release-package:
	$(if $(STAGE),STAGE="$(STAGE)",VERSION=$(VERSION)) GO=$(GO) RELEASE_KEY="$(RELEASE_KEY)" ALLOW_DOWNGRADE="$(ALLOW_DOWNGRADE)" scripts/build-release

## check-packages: lintian, rpm -qpl, systemd-analyze verify, and a real dpkg -i/purge (root) of dist/
check-packages: packages
	scripts/check-packages

clean:
	rm -rf $(BIN) dist .cache

.PHONY: run
## run: the same as demo: the whole system on one machine, commands run through it, everything stopped after
run: demo

.PHONY: demo demo-tools demo-check
## demo: a newcomer's tour: a throwaway PostgreSQL, its own command-signing authority and three approver keys, bc-server signing every command under a 2-of-3 quorum, three bcd nodes on mock GPUs (healthy, faulty, offline until the end), diagnostics, a support bundle, a reboot batch approved twice then run once, the platform's GPU-reset remediation approved and verified, a cancelled command, a summary; everything stopped after (DEMO_FLAGS=--json for JSON, --keep-open to keep it running). It prints the console's address and the export line for the CLI, and writes only under its temporary directories.
# DEMO_STARTED_AT is when make started (read once, as make reads this file),
# so that the demo's closing "done in" counts the build too.
demo: export DEMO_STARTED_AT := $(shell date +%s)
demo: deps-demo build demo-tools
	BIN=$(BIN) scripts/demo $(DEMO_FLAGS)

## demo-tools: what only the demo runs: the fake logind on its private D-Bus, and the mock nvidia-smi of its mock GPUs
demo-tools:
	@mkdir -p $(BIN)/tools
	$(GO) build -o $(BIN)/tools/ ./internal/tools/fakelogind ./internal/tools/mocknvidiasmi

## fakes: the fakes the docs' try-it procedures run, into bin/tools: bc-fake-bmc (Redfish and IPMI BMCs on loopback) and bc-fake-systemd (systemd's manager on a private D-Bus, for daemon.upgrade's handoff)
.PHONY: fakes
fakes:
	@mkdir -p $(BIN)/tools
	$(GO) build -o $(BIN)/tools/ ./internal/tools/bc-fake-bmc ./internal/tools/bc-fake-systemd

## demo-check: scripts/demo as root with / and /sys read-only, only a fresh temporary directory writable: it must pass, write nothing elsewhere, print no error line, count its whole run and leave nothing behind (CI runs it)
demo-check: deps-demo build demo-tools
	BIN=$(BIN) scripts/demo-check
