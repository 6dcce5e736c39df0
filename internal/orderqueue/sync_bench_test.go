package orderqueue

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkAcceptSynced is the cost of what a 202 waits for — the order's message published and
// its record written, both acknowledged — on a server that syncs every write before it
// acknowledges it (sync_interval: always, as the embedded and the tests' servers do) and on one
// that leaves the write to the kernel (the server's default: a crash of the machine may take back
// the last writes), by 64 publishers at once, as admission's batches hand orders over.
func BenchmarkAcceptSynced(b *testing.B) {
	for _, synced := range []bool{true, false} {
		b.Run(fmt.Sprintf("sync_always=%t", synced), func(b *testing.B) {
			publish(b, benchQueue(b, synced), true)
		})
	}
}

// BenchmarkQueueRound is the least a queued order can cost the queue: its message published,
// handed to a writer and acked, with 64 publishers and one writer taking batches of 64 — and the
// same with the record a 202 writes today beside the message; on a server that syncs every write
// (as a durable 202 needs) and on one that does not. ns/op bounds the orders per second the queue
// passes on this machine's disk; cpu-s/1000 is this process's CPU (the server is in it, and so
// are the publishers and the writer) per 1000 orders, the unit of the load tool's CPU tables.
func BenchmarkQueueRound(b *testing.B) {
	for _, c := range []struct{ synced, record bool }{{true, false}, {true, true}, {false, false}, {false, true}} {
		b.Run(fmt.Sprintf("sync_always=%t/record=%t", c.synced, c.record), func(b *testing.B) {
			q := benchQueue(b, c.synced)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			var acked atomic.Int64
			all := make(chan struct{})
			go q.Work(ctx, 64, 50*time.Millisecond, 10*time.Second, func(_ context.Context, batch Batch) {
				for _, d := range batch.Deliveries {
					_ = d.Ack()
					if acked.Add(1) == int64(b.N) {
						close(all)
					}
				}
			})
			before := cpu()
			publish(b, q, c.record)
			select {
			case <-all:
			case <-time.After(time.Minute):
				b.Fatalf("%d of %d orders acked within a minute", acked.Load(), b.N)
			}
			b.StopTimer()
			b.ReportMetric((cpu()-before).Seconds()*1000/float64(b.N), "cpu-s/1000")
		})
	}
}

// cpu is the CPU time this process has spent, user and system.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchQueue opens a queue of its own on an embedded JetStream server that syncs every write
// before it acknowledges it, or not; both are closed when the benchmark ends.
func benchQueue(b *testing.B, synced bool) *Queue {
	ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: b.TempDir(), SyncAlways: synced,
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		b.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats server not ready")
	}
	b.Cleanup(ns.Shutdown)
	cfg := testConfig(Config{URLs: []string{ns.ClientURL()}, MaxBytes: 1 << 30, MaxMsgs: 1 << 30})
	q, err := Open(context.Background(), cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(q.Close)
	return q
}

// publish runs b.N orders through q, 64 publishers at once: each order published, and recorded
// queued after it when record.
func publish(b *testing.B, q *Queue, record bool) {
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(32) // 64 publishers on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o := order("bench", fmt.Sprintf("o-%d", n.Add(1)))
			if _, err := q.Publish(ctx, o); err != nil {
				b.Error(err)
				return
			}
			if !record {
				continue
			}
			if _, err := q.Record(ctx, Record{Order: o, State: Queued}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
