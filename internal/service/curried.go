package service

import "sync"

// curried keeps the metrics of one vector by their label values, each looked up once: a lookup
// hashes the labels, and every order would pay for it. The label values come from bounded sets
// (the strategies, the error codes), so what it keeps is bounded too.
type curried[M any] struct {
	with func(labels ...string) M // the vector's WithLabelValues
	mu   sync.RWMutex
	seen map[[2]string]M
}

func newCurried[M any](with func(labels ...string) M) *curried[M] {
	return &curried[M]{with: with, seen: map[[2]string]M{}}
}

// get is the metric of the label values a and b ("" past the vector's labels).
func (c *curried[M]) get(a, b string) M {
	key := [2]string{a, b}
	c.mu.RLock()
	m, ok := c.seen[key]
	c.mu.RUnlock()
	if ok {
		return m
	}
	m = c.with(a, b)
	c.mu.Lock()
	c.seen[key] = m
	c.mu.Unlock()
	return m
}
