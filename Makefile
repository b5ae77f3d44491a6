# rlcluster's developer tasks. `make help` lists them.

GO                    ?= go
GOBIN                 ?= $(shell $(GO) env GOPATH)/bin
PROTOC_GEN_GO_VERSION         := v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1
# staticcheck 2026.2.2 is module version v0.8.2.
STATICCHECK_VERSION           := v0.8.2
PROTO_FILES           := $(shell find proto -name '*.proto' | sort)
# The WAN emulator of the demo is a Go module of its own.
WANEM                 := deploy/multiregion/wanem
# gofmt checks every Go file except the generated ones.
GO_FILES               = $(shell find . -name '*.go' -not -path './gen/*' -not -path './.git/*')

export PATH := $(GOBIN):$(PATH)

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run
run: ## Run a node on the in-memory store (127.0.0.1:8080)
	$(GO) run ./cmd/rlnode

.PHONY: test
test: ## Run every test (the README's test command, then the WAN emulator's)
	$(GO) test ./...
	cd $(WANEM) && $(GO) test ./...

.PHONY: test-race
test-race: ## Run every test with the race detector (as CI does)
	$(GO) test -race -p 1 ./...
	cd $(WANEM) && $(GO) test -race ./...

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@out="$$(gofmt -l $(GO_FILES))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./... ./.ci/testreport
	cd $(WANEM) && $(GO) vet ./...
	staticcheck ./... ./.ci/testreport
	cd $(WANEM) && staticcheck ./...

# The tool versions are pinned here only; .ci/run installs them with
# `make tools`.
.PHONY: tools
tools: ## Install the pinned code generators and staticcheck into GOBIN
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# protoc-gen writes the generated code for PROTO_FILES under $(1).
protoc-gen = protoc -I proto \
	--go_out=$(1) --go_opt=paths=source_relative \
	--connect-go_out=$(1) --connect-go_opt=paths=source_relative \
	$(PROTO_FILES)

.PHONY: generate
generate: ## Regenerate gen/ from proto/ (needs protoc and `make tools`)
	$(call protoc-gen,gen)

.PHONY: checkgenerate
checkgenerate: ## Fail if gen/ is not what proto/ generates
	@set -e; tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; \
	$(call protoc-gen,$$tmp); \
	if ! diff -r "$$tmp" gen; then echo "gen/ is stale: run make generate"; exit 1; fi; \
	echo "gen/ is current"

# FUZZTIME is how long `make fuzz` runs each fuzz target.
FUZZTIME              ?= 10s

.PHONY: fuzz
fuzz: ## Run every Fuzz* target for FUZZTIME each (default 10s): make fuzz FUZZTIME=1m
	@set -e; out=$$(mktemp); trap 'rm -f "$$out"' EXIT; \
	for f in $$(grep -rl --include='*_test.go' '^func Fuzz' internal cmd | sort); do \
		pkg=./$$(dirname $$f); \
		for fn in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
			if $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg >"$$out" 2>&1; then \
				tail -n 3 "$$out"; continue; \
			fi; \
			cat "$$out"; \
			if grep -q 'context deadline exceeded' "$$out" && ! grep -q 'Failing input written' "$$out"; then \
				echo "fuzz: $$fn hit Go 1.26's -fuzztime shutdown race (go.dev/issue/75804), no failing input; running 2000 more inputs with a count budget"; \
				$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime 2000x -timeout 2m $$pkg; \
			else \
				exit 1; \
			fi; \
		done; \
	done

# BENCH_FLAGS go to the load harness, e.g. BENCH_FLAGS='-duration 5s -only redis'.
BENCH_FLAGS ?=

.PHONY: bench
bench: ## Run the load harness: the node vs the ceiling and redis-benchmark, one table
	$(GO) run ./loadtest/bench $(BENCH_FLAGS)

.PHONY: bench-go
bench-go: ## Run the Go benchmarks of the decision path (-benchmem, no tests)
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...

# Compose v2 when the docker CLI has it, else Debian's docker-compose.
COMPOSE               ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
DEMO                  := cd deploy/multiregion &&

.PHONY: demo
demo: ## Build the demo's images and start 3 regions (status page: http://127.0.0.1:8111/)
	deploy/multiregion/build-images.sh
	$(DEMO) $(COMPOSE) up -d
	@echo "status page http://127.0.0.1:8111/ (us-1; eu-1 :8121, ap-1 :8131), Prometheus http://127.0.0.1:9090/"

# demo-load's knobs: SCRIPT=steady|burst|hotkey|manykeys, and any of
# DEMO_LOAD_KNOBS, which reach the k6 script as environment variables when
# set (each script's header lists the ones it reads and their defaults), e.g.
# make demo-load SCRIPT=steady DURATION=20 LIMIT=600 KEY=demo.
SCRIPT                ?= steady
DEMO_LOAD_KNOBS       := KEY DURATION LIMIT WINDOW RATE FACTOR KEYS OTHER_RATE OVER_PCT HOT_OVER_PCT P99_MS TARGETS
.PHONY: demo-load
demo-load: ## Run a k6 load test against the demo (SCRIPT=steady; KEY, DURATION, LIMIT, WINDOW, RATE, P99_MS, TARGETS, ...; summary in deploy/multiregion/results/)
	$(DEMO) $(COMPOSE) --profile load run --rm $(strip $(foreach v,$(DEMO_LOAD_KNOBS),$(if $($(v)),-e $(v)='$($(v))'))) k6 run /scripts/$(SCRIPT).js

.PHONY: demo-down
demo-down: ## Stop the demo and remove its containers and networks
	$(DEMO) $(COMPOSE) --profile load down -v --remove-orphans

.PHONY: e2e
e2e: ## End-to-end test: build, start the demo, load, cut a region off, check agreement, tear down
	deploy/multiregion/e2e.sh

.PHONY: ci
ci: ## Run what CI runs (.ci/run)
	bash .ci/run
