# hybridlimit: make test | bench | demo | lint. Needs GNU make, bash and Go;
# Redis is installed with apt-get when missing (scripts/redis.sh ensure).

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
GOFMT ?= $(dir $(GO))gofmt
GOBIN_DIR := $(shell $(GO) env GOPATH 2>/dev/null)/bin

# Go modules in this repository: the library, bench/ (its own go.mod,
# so comparison peers never reach users' dependency graphs) once it exists,
# envoy/ (the Envoy rate limit service) and grpclimit/ (the gRPC
# interceptors), each its own go.mod, so gRPC and Envoy's protos reach only
# their users.
MODULES := . $(if $(wildcard bench/go.mod),bench) $(if $(wildcard envoy/go.mod),envoy) $(if $(wildcard grpclimit/go.mod),grpclimit)

.PHONY: test test-go bench bench-envoy demo demo-local lint staticcheck redis-start redis-stop cluster-start clean bench-accuracy bench-accuracy-short bench-accuracy-run bench-outage bench-idle bench-scale bench-regions bench-flood

## test: start a Redis server, a 3-master Cluster, a Sentinel topology and a replicated Cluster, vet and test every module with -race, stop them.
test:
	bash scripts/with-redis.sh $(MAKE) --no-print-directory test-go

# The tests that skip under -race, whose figures the race detector's
# allocations would spoil: run once more without it.
NORACE_TESTS := TestNoAllocations|TestSubWindowNoAllocations|TestMemoryPerKey
# The same in hybrid, run beside the simulation.
HYBRID_NORACE := ^(TestSimulation|TestAllowNoAllocs|TestMemoryPerRule)
# The same in the middleware; TestRulesChurn runs its full count of rules
# there (a smaller one under -race).
HTTP_NORACE := ^(TestAllocs|TestRulesChurn)$$

## test-go: vet and test every module against whatever HYBRIDLIMIT_REDIS_* point at (no servers started).
# The hybrid simulation, one goroutine's event loop that waits on Redis and
# skips under -race, runs without it beside the -race pass, on the core
# that pass leaves idle; its output follows the pass's.
test-go:
	@if [[ ! -f bench/go.mod ]]; then echo "make: bench/go.mod not found: skipping the bench module"; fi
	@mkdir -p .run; failed=(); \
	$(GO) test -count=1 -timeout 20m -run '$(HYBRID_NORACE)' ./hybrid >.run/simulation.log 2>&1 & sim=$$!; \
	for m in $(MODULES); do \
		echo "== $$m: go vet ./..."; \
		(cd "$$m" && $(GO) vet ./...) || failed+=("go vet in $$m"); \
		echo "== $$m: go test -race -count=1 -timeout 20m ./..."; \
		(cd "$$m" && $(GO) test -race -count=1 -timeout 20m ./...) || failed+=("go test in $$m"); \
	done; \
	echo "== .: go test -count=1 -run '$(HYBRID_NORACE)' ./hybrid (the simulation and the allocation check, without -race)"; \
	wait $$sim || failed+=("the hybrid simulation"); cat .run/simulation.log; \
	echo "== .: go test -count=1 -run '$(NORACE_TESTS)' ./local (what the race detector's own allocations hide)"; \
	$(GO) test -count=1 -run '$(NORACE_TESTS)' ./local || failed+=("go test ./local without -race"); \
	echo "== .: go test -count=1 -run '$(HTTP_NORACE)' ./hybrid/httplimit (the middleware's allocations and rule churn, without -race)"; \
	$(GO) test -count=1 -run '$(HTTP_NORACE)' ./hybrid/httplimit || failed+=("go test ./hybrid/httplimit without -race"); \
	if [[ -f grpclimit/go.mod ]]; then \
		echo "== grpclimit: go test -count=1 -run '^TestAllocs$$' . (the interceptor's allocations, without -race)"; \
		(cd grpclimit && $(GO) test -count=1 -run '^TestAllocs$$' .) || failed+=("go test ./grpclimit without -race"); \
	fi; \
	if (( $${#failed[@]} )); then printf 'FAILED: %s\n' "$${failed[@]}"; exit 1; fi

## bench: run scripts/bench.sh with Redis servers started for it.
bench:
	bash scripts/with-redis.sh bash scripts/bench.sh

## demo: the cluster demo (examples/cluster): four node processes share one
## limit per client through a redis-server it starts (installed with apt-get
## when missing), which it kills and starts again; a row per window beside an
## exact replay of the same requests, a summary per phase and
## .run/demo/timeline.svg. About 35 s. DEMO_FLAGS passes flags to it.
demo:
	bash scripts/redis.sh ensure >&2
	mkdir -p .run/demo
	$(GO) build -o .run/demo/cluster ./examples/cluster
	.run/demo/cluster -out .run/demo $(DEMO_FLAGS)

## demo-local: the local-mode tour (examples/local): six algorithms on the
## same traffic, in virtual time; installs nothing.
demo-local:
	$(GO) run ./examples/local

## lint: gofmt, go vet, staticcheck and go mod tidy -diff on every module.
lint: staticcheck
	@out=$$($(GOFMT) -l .); if [[ -n $$out ]]; then echo "gofmt -l: these files need gofmt:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do \
		echo "== $$m: go vet ./..."; (cd "$$m" && $(GO) vet ./...); \
		echo "== $$m: staticcheck ./..."; (cd "$$m" && "$(STATICCHECK)" ./...); \
		echo "== $$m: go mod tidy -diff"; (cd "$$m" && $(GO) mod tidy -diff); \
	done
	@echo "lint: ok"

# staticcheck from PATH or GOPATH/bin; installed with go install when missing.
STATICCHECK = $(or $(shell command -v staticcheck 2>/dev/null),$(GOBIN_DIR)/staticcheck)
staticcheck:
	@if [[ ! -x "$(STATICCHECK)" ]]; then \
		echo "installing staticcheck"; \
		GOBIN="$(GOBIN_DIR)" $(GO) install honnef.co/go/tools/cmd/staticcheck@latest; \
	fi

## redis-start: start one Redis server (address in .run/redis.addr).
redis-start:
	bash scripts/redis.sh ensure
	bash scripts/redis.sh start-single
	@bash scripts/redis.sh env

## cluster-start: start a 3-master Redis Cluster (addresses in .run/cluster.addrs).
cluster-start:
	bash scripts/redis.sh ensure
	bash scripts/redis.sh start-cluster
	@bash scripts/redis.sh env

## redis-stop: stop every Redis server this checkout started.
redis-stop:
	bash scripts/redis.sh stop

## clean: stop the servers and remove .run/.
clean: redis-stop
	rm -rf .run

## bench-accuracy: the multi-process accuracy benchmark: N node processes
## (GOMAXPROCS=1 each) per mode, workload and algorithm against a private
## redis-server it starts; prints the main table, the api-users table (with
## rows against a private three-master Redis Cluster it starts for them,
## marked (cluster)), the outage row and the api-patterns table (false
## refusals), and writes docs/accuracy-results.md and
## docs/img/accuracy-*.svg. About 75 minutes (the api-users runs alone, 30
## windows of 10 s, take 18 minutes and their Cluster rows 14 more:
## ACCURACY_FLAGS='-main=false -curves=false -patterns=false', without the
## Cluster rows -users-cluster=false; the api-patterns
## runs alone about 5: ACCURACY_FLAGS='-main=false -curves=false -users=false
## -outage=false'). ACCURACY_FLAGS passes flags to bench/cmd/accuracy (e.g.
## ACCURACY_FLAGS='-windows 10 -curves=false'; -api-wait sets the hybrid
## rules' wait for a lease).
bench-accuracy: bench-accuracy-run

# Where bench-accuracy writes its document and plots (empty: nowhere).
ACCURACY_DOC ?= -doc ../docs/accuracy-results.md -img ../docs/img

bench-accuracy-run:
	bash scripts/redis.sh ensure >&2
	mkdir -p .run/accuracy
	cd bench && $(GO) build -o ../.run/accuracy/accnode ./cmd/accnode && $(GO) build -o ../.run/accuracy/accuracy ./cmd/accuracy
	cd bench && ../.run/accuracy/accuracy -node ../.run/accuracy/accnode -out ../.run/accuracy $(ACCURACY_DOC) $(ACCURACY_FLAGS)

## bench-accuracy-short: a quick check of the same (about 9 minutes, fewer and
## shorter runs, no Cluster rows: ACCURACY_FLAGS=-users-cluster adds them);
## prints the tables, writes nothing into docs/.
bench-accuracy-short:
	$(MAKE) --no-print-directory bench-accuracy-run ACCURACY_DOC= ACCURACY_FLAGS='-short $(ACCURACY_FLAGS)'

## bench-idle: what a Limiter costs a process that asks little of it: the
## CPU of child processes holding an idle Limiter (without Redis, with a
## private redis-server it starts, with gossip), and one rule asked once a
## second, beside a Go process that does nothing; 10 s each, 3 repetitions
## side by side (about 40 s). IDLE_FLAGS passes flags (e.g. -d 30s -count 5).
bench-idle:
	bash scripts/redis.sh ensure >&2
	mkdir -p .run/idle
	cd bench && $(GO) build -o ../.run/idle/idle ./cmd/idle
	.run/idle/idle -dir .run/idle $(IDLE_FLAGS)

## bench-scale: many keys held on one node under one hybrid rule: the first
## request of each of 1,000,000 keys, then 10,000 requests/s over them for
## 30 s, against a private redis-server; heap and Redis memory per key, sync
## rounds, node and Redis CPU per decision. SCALE_FLAGS passes flags (e.g.
## -keys 100000 -rate 2000).
bench-scale:
	bash scripts/redis.sh ensure >&2
	mkdir -p .run/scale
	cd bench && $(GO) build -o ../.run/scale/scale ./cmd/scale
	.run/scale/scale -dir .run/scale $(SCALE_FLAGS)

## bench-flood: a flood of never-repeating keys against one node while
## 1,000 legitimate keys keep asking under their limit: each case (local and
## hybrid mode, fixed window and GCRA, 20,000 and 100,000 flood keys/s) in a
## child process holding the Limiter, against a private redis-server; per
## phase (before, during and after a 30 s flood) the heap, RSS, keys held,
## legitimate requests refused and why, their latency, and Redis's keys and
## memory. About 11 minutes. FLOOD_FLAGS passes flags (e.g. -maxkeys 100000
## -rates 20000 -modes hybrid).
bench-flood:
	bash scripts/redis.sh ensure >&2
	mkdir -p .run/flood
	cd bench && $(GO) build -o ../.run/flood/flood ./cmd/flood
	.run/flood/flood -dir .run/flood $(FLOOD_FLAGS)

## bench-outage: the outage benchmark: node processes (5 with steady
## arrivals, 4 with Poisson ones) per workload against a redis-server it
## kills (or stops) for ten windows, and a Sentinel group and a Cluster with
## replicas whose master it kills; every failure policy side by side on the
## same arrivals. Prints the table and writes docs/outage.md and
## docs/img/outage-*.svg. About 15 minutes. OUTAGE_FLAGS passes flags to
## bench/cmd/outage (e.g. OUTAGE_FLAGS='-fault sentinel -v').
bench-outage:
	bash scripts/redis.sh ensure >&2
	mkdir -p .run/outage
	$(GO) build -o .run/outage/gossipnode ./internal/cmd/gossipnode
	cd bench && $(GO) build -o ../.run/outage/outage ./cmd/outage
	.run/outage/outage -node .run/outage/gossipnode -doc docs/outage.md -img docs/img $(OUTAGE_FLAGS)

## bench-regions: regions × node processes under one global limit, a
## redis-server per region and a global one behind slow links
## (internal/netproxy): uniform traffic, traffic shifting between regions,
## one region alone, a region cut off, the global store killed; (C) the
## rules of global reach beside today's two answers, (A) Central against the
## global Redis and (B) each region at L ÷ regions; the shift run's plot in
## docs/img/regions-shift.svg. About 4 minutes. REGIONS_FLAGS passes flags
## (e.g. '-scenario cut -v', '-latency 0,40ms,80ms', '-window 60s -windows 3').
bench-regions:
	bash scripts/redis.sh ensure >&2
	mkdir -p .run/regions
	cd bench && $(GO) build -o ../.run/regions/regions ./cmd/regions
	.run/regions/regions -svg docs/img/regions-shift.svg -json .run/regions/regions.json $(REGIONS_FLAGS)

## bench-envoy: envoy/cmd/hybridlimit-ratelimit beside a reproduction of
## envoyproxy/ratelimit's decision path (one pipelined INCRBY + EXPIRE per
## descriptor), 3 replicas each against a private redis-server: decisions
## per second and per core, p50/p99 latency from a gRPC client, Redis
## commands per decision, admitted ÷ limit; then the same with Redis killed
## for 10 s. About 70 s. ENVOYBENCH_FLAGS passes flags to
## bench/cmd/ratelimitbench (e.g. ENVOYBENCH_FLAGS='-rate 2000 -outage 0').
bench-envoy:
	bash scripts/redis.sh ensure >&2
	mkdir -p .run/envoybench
	cd envoy && $(GO) build -o ../.run/envoybench/hybridlimit-ratelimit ./cmd/hybridlimit-ratelimit
	cd bench && $(GO) build -o ../.run/envoybench/ratelimitbench ./cmd/ratelimitbench
	.run/envoybench/ratelimitbench -service .run/envoybench/hybridlimit-ratelimit -out .run/envoybench $(ENVOYBENCH_FLAGS)
