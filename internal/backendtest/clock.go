package backendtest

import (
	"sync/atomic"
	"time"
)

// Clock runs with the wall clock, and a test moves it forward at once (Advance): a bound of the
// product — the breaker's cooldown, a grace — is then passed by the test, not waited out. Give
// its Now to service.Config.Clock.
type Clock struct{ ahead atomic.Int64 }

// Now is the wall clock plus every Advance so far.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.ahead.Add(int64(d)) }
