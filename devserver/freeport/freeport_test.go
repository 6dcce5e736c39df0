package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPortsBelowEphemeral: distinct ports, each free to bind, none where the kernel picks the
// local ports of outgoing connections.
func TestPortsBelowEphemeral(t *testing.T) {
	ports, err := Ports(50)
	require.NoError(t, err)
	seen := map[int]bool{}
	for _, p := range ports {
		assert.False(t, seen[p], "port %d twice", p)
		seen[p] = true
		assert.GreaterOrEqual(t, p, lowest)
		assert.Less(t, p, ephemeralStart(), "port %d is in the ephemeral range", p)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if assert.NoError(t, err, "port %d not free", p) {
			_ = ln.Close()
		}
	}
}
