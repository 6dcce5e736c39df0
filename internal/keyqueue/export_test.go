package keyqueue

// Waiting is how many items of key wait for a round, for tests that act once they all queued.
func Waiting[T comparable](q *Queue[T], key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting[key])
}
