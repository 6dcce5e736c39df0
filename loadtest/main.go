// Command loadtest runs a flash sale against seckill over HTTP and proves what happened: it
// drives the API with vegeta (one buyer and one Idempotency-Key per request), classifies every
// answer by status and error code, splits the selling phase from the sold-out phase, and then
// verifies the invariant in the store itself — the tables of the -mysql database, or the SQLite
// file of the processes it starts — holding the service's audit endpoint and every acknowledged
// order against them (against -target without -mysql it cannot read the store, and verifies
// through the API alone). With -compare it runs every strategy in turn on a fresh product —
// each row -rounds times (3 by default), interleaved, reporting the median of each figure with its
// min–max — and writes the comparison as Markdown headed by the line that says which command,
// commit and machine measured it, HTML with latency plots, and JSON. With -soldout it keeps
// ordering each sold-out product and holds the rejections against a bare net/http handler
// measured in the same run; with -group-commit it repeats the comparison once per service
// configuration, and on MySQL it runs pessimistic once more in its waiting form
// (SECKILL_ROW_LOCK=wait) beside its default (NOWAIT); with -fault lock-loss it takes each
// sale's lock from its holder, over and over, while the sale sells, and compares every lock
// strategy with its unguarded twin, which must be caught overselling; with a -concurrency list
// it repeats the whole comparison at each client count. It judges every row against the performance targets of its count, and reports what each
// process group — the service, the database, Redis, etcd, NATS, the load generator — costs in CPU
// per order, the CPU-bound ceiling that cost sets on this machine's cores, and how close each row
// came to it.
//
// It is a black-box client of the HTTP contract (internal/handler/openapi.yaml, served at
// /openapi.yaml) and imports no package of the service's internal/: only the contract's wire
// types (api) and the public dev servers (devserver/) that start the etcd and the ZooKeeper of
// the instances it spawns. Where each strategy locks a product, for -fault lock-loss, it asks the
// service (GET /api/v1/products/{sku}/locks). With no -target it builds cmd/api, starts it on
// the embedded default, runs the comparison and stops it. The body is package runner; main only
// catches the signals and runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/flashsale/seckill/loadtest/runner"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served, err := runner.ServeReexecuted(ctx)
	if !served {
		err = runner.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}
