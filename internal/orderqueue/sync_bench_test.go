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

	"github.com/flashsale/seckill/internal/keyqueue"
)

// BenchmarkAcceptSynced is the cost of what a 202 waits for — the order's batch published and
// recorded, both acknowledged — on a server that syncs every write before it acknowledges it
// (sync_interval: always, as the embedded and the tests' servers do) and on one that leaves the
// write to the kernel (the server's default: a crash of the machine may take back the last
// writes), by 64 publishers at once: each order in a batch of its own (batch=1), or in the batch
// of the orders that came while the last publish was in flight, up to 64 (group commit, as the
// queued strategy publishes).
func BenchmarkAcceptSynced(b *testing.B) {
	for _, synced := range []bool{true, false} {
		for _, most := range []int{1, 64} {
			b.Run(fmt.Sprintf("sync_always=%t/batch=%d", synced, most), func(b *testing.B) {
				publish(b, benchQueue(b, synced), most, true)
			})
		}
	}
}

// BenchmarkQueueRound is the least a queued order can cost the queue: its batch published, handed
// to a writer and acked, with 64 publishers and one writer taking 64 messages at a time — and the
// same with the batch's record beside its message, as a 202 needs; each order in a batch of its
// own (batch=1, one message, one record and one ack each), or grouped as the queued strategy
// groups them (batch=64: those that came while the last publish was in flight, up to 64); on a
// server that syncs every write (as a durable 202 needs) and on one that does not. ns/op bounds
// the orders per second the queue passes on this machine's disk; cpu-s/1000 is this process's CPU
// (the server is in it, and so are the publishers and the writer) per 1000 orders, the unit of
// the load tool's CPU tables; orders/msg is the orders a message carried, on average.
func BenchmarkQueueRound(b *testing.B) {
	for _, synced := range []bool{true, false} {
		for _, most := range []int{1, 64} {
			for _, record := range []bool{false, true} {
				b.Run(fmt.Sprintf("sync_always=%t/batch=%d/record=%t", synced, most, record), func(b *testing.B) {
					q := benchQueue(b, synced)
					ctx, stop := context.WithCancel(context.Background())
					defer stop()
					var acked, msgs atomic.Int64
					all := make(chan struct{})
					go q.Work(ctx, 64, 50*time.Millisecond, 10*time.Second, func(_ context.Context, t Taken) {
						for _, d := range t.Deliveries {
							_ = d.Ack()
							msgs.Add(1)
							if acked.Add(int64(len(d.Batch.Orders))) == int64(b.N) {
								close(all)
							}
						}
					})
					before := cpu()
					publish(b, q, most, record)
					select {
					case <-all:
					case <-time.After(time.Minute):
						b.Fatalf("%d of %d orders acked within a minute", acked.Load(), b.N)
					}
					b.StopTimer()
					b.ReportMetric((cpu()-before).Seconds()*1000/float64(b.N), "cpu-s/1000")
					b.ReportMetric(float64(b.N)/float64(max(1, msgs.Load())), "orders/msg")
				})
			}
		}
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

// publish runs b.N orders through q, 64 publishers at once: each order's batch published, and
// recorded queued after it when record. A batch holds the orders that came while the last one
// was out, up to most (keyqueue), as the queued strategy's publisher groups them.
func publish(b *testing.B, q *Queue, most int, record bool) {
	ctx := context.Background()
	type sending struct {
		user string
		err  error
		done chan struct{}
	}
	send := func(users ...string) error {
		bt := batch("bench", users...)
		if _, err := q.Publish(ctx, bt); err != nil {
			return err
		}
		if record {
			_, err := q.Record(ctx, BatchRecord{Batch: bt, State: Queued})
			return err
		}
		return nil
	}
	rounds := keyqueue.New(most, func(_ string, take func() []*sending) {
		ss := take()
		users := make([]string, len(ss))
		for i, s := range ss {
			users[i] = s.user
		}
		err := send(users...)
		for _, s := range ss {
			s.err = err
			close(s.done)
		}
	})
	var n atomic.Int64
	b.SetParallelism(32) // 64 publishers on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s := &sending{user: fmt.Sprintf("u-%d", n.Add(1)), done: make(chan struct{})}
			err := rounds.Await(ctx, "bench", s, s.done)
			if err == nil {
				err = s.err
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
