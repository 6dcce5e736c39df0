package orderqueue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// embed starts the data dir's embedded NATS server, or finds the one another instance on the
// same data dir runs, and returns its client URL. Two servers on one store would corrupt it —
// JetStream takes no lock of its own — and instances that share a data dir (replicas on one
// machine sharing its SQLite file, the load tool's processes, the lab's instances) should share
// its queue as they share its database: so the first takes an exclusive lock on the store and
// serves on a loopback port it writes beside the lock; the others read that address and connect
// to it. When the first stops, the lock is released (by the kernel, if it was killed) and the
// next instance to start takes over, on the same store.
func (q *Queue) embed() (string, error) {
	dir := filepath.Join(q.cfg.DataDir, "nats")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("embedded NATS server: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("embedded NATS server: %w", err)
	}
	address := filepath.Join(dir, "ADDRESS")
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = lock.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return "", fmt.Errorf("embedded NATS server: lock %s: %w", dir, err)
		}
		return sharedAddress(address)
	}
	q.lock = lock
	_ = os.Remove(address) // a dead owner's: no instance may connect there
	ns, err := server.NewServer(&server.Options{
		ServerName: "seckill-embedded",
		JetStream:  true,
		StoreDir:   dir,
		SyncAlways: true, // an acknowledged order survives a crash of the machine: a 202 holds
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		return "", fmt.Errorf("embedded NATS server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return "", errors.New("embedded NATS server: not ready after 10 s")
	}
	q.embedded = ns
	tmp := address + ".tmp"
	if err := os.WriteFile(tmp, []byte(ns.ClientURL()), 0o644); err != nil {
		return "", fmt.Errorf("embedded NATS server: %w", err)
	}
	if err := os.Rename(tmp, address); err != nil {
		return "", fmt.Errorf("embedded NATS server: %w", err)
	}
	return ns.ClientURL(), nil
}

// sharedAddress waits up to 10 s for the instance that holds the store's lock to say where its
// server listens (it may be starting).
func sharedAddress(path string) (string, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b)), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("embedded NATS server of another instance on %s: no address after 10 s: %w", filepath.Dir(path), ErrUnavailable)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
