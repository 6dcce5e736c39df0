# Shortcuts for the commands in README.md.
.PHONY: run test test-short vet build loadtest

run: ## run the service on the embedded default
	go run ./cmd/api

test: ## the full test suite (real MariaDB when reachable; SECKILL_TEST_REQUIRE_BACKENDS=1 to insist)
	go test -race -count=1 ./...

test-short: ## skip the multi-process tests
	go test -short -count=1 ./...

vet:
	gofmt -l $$(git ls-files '*.go')
	go vet ./...

build:
	go build -o seckill ./cmd/api

loadtest: ## compare every strategy on the embedded default (builds and starts the service)
	go run ./loadtest
