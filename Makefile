# Shortcuts for the commands in README.md.
.PHONY: run test test-short vet build loadtest bench compare tidb

run: ## run the service on the embedded default
	go run ./cmd/api

test: ## the full test suite in its two lanes, as CI runs it (real MariaDB when reachable; SECKILL_TEST_REQUIRE_BACKENDS=1 to insist)
	scripts/test.sh

test-short: ## skip the multi-process tests
	go test -short -count=1 ./...

vet:
	gofmt -l $$(git ls-files '*.go')
	go vet ./...

build:
	go build -o seckill ./cmd/api

loadtest: ## compare every strategy on the embedded default (builds and starts the service)
	go run ./loadtest

bench: ## the critical sections per order and batched, the etcd mutex hand-off, then the load tool's comparison at 64 and 512 clients, three interleaved rounds of 12000-unit sales (needs local MariaDB and Redis; 28 minutes on a 2-core machine on 2026-12-07, checkout rows included)
	SECKILL_TEST_REQUIRE_BACKENDS=1 go test -run '^$$' -bench CriticalSection -benchtime 2000x ./internal/stock
	SECKILL_TEST_REQUIRE_BACKENDS=1 go test -run '^$$' -bench EtcdMutexHandoff -benchtime 200x ./internal/lock/etcdlock
	go run ./loadtest -spawn 3 -mysql 'root:@tcp(127.0.0.1:3306)/seckill_lt?parseTime=true' -redis 127.0.0.1:6379 \
		-stock 12000 -users 24000 -concurrency 64,512 -retry-busy 0 -soldout 3s -rounds 3

compare: ## per order vs batched on three processes, local MariaDB and Redis (docs/performance.md)
	go run ./loadtest -spawn 3 -mysql 'root:@tcp(127.0.0.1:3306)/seckill_lt?parseTime=true' -redis 127.0.0.1:6379 \
		-stock 10000 -users 40000 -concurrency 64 -retry-busy 0 -soldout 5s -group-commit 0,64

tidb: ## opt-in, never in CI: build tidb-server at the version pinned in tools/tidb (a module of its own; the first build takes minutes of CPU and 1.8 GB of module cache), start it on its mock store (-store unistore), run the store and strategy suites against it (docs/operations.md)
	tools/tidb/run
