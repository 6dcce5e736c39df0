package orderqueue

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
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
			ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: b.TempDir(), SyncAlways: synced,
				Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
			if err != nil {
				b.Fatal(err)
			}
			go ns.Start()
			if !ns.ReadyForConnections(10 * time.Second) {
				b.Fatal("nats server not ready")
			}
			defer ns.Shutdown()
			cfg := testConfig(Config{URLs: []string{ns.ClientURL()}, MaxBytes: 1 << 30, MaxMsgs: 1 << 30})
			ctx := context.Background()
			q, err := Open(ctx, cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
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
					if _, err := q.Record(ctx, Record{Order: o, State: Queued}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
