package service

import "sync"

// curried keeps a vector's metrics by label values, each looked up once, so that orders do not
// pay for hashing the labels. The values (strategies, error codes) are bounded, and so is it.
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
