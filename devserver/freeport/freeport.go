// Package freeport finds free loopback ports for the servers that tests, the lab and the load
// tool start themselves (ZooKeeper, redis-server).
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// lowest is the lowest port Ports hands out: above the well-known and the usual fixed ones.
const lowest = 10000

// Ports returns n loopback ports that were free a moment ago. They are held open together, so
// that the n are distinct. They are drawn below the kernel's ephemeral range: a port from
// Listen(":0") is one that any outgoing connection of the machine may take as its own before the
// server binds it (a busy test suite opens thousands), and a node restarted on its old port then
// fails with "address already in use". Another process may still take one, but only by choosing
// it as a listener, as Ports does.
func Ports(n int) ([]int, error) {
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("no %d free ports below %d", n, ephemeralStart())
		}
		port := lowest + rand.IntN(ephemeralStart()-lowest)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		defer ln.Close()
		ports = append(ports, port)
	}
	return ports, nil
}

// ephemeralStart is the first port of the kernel's ephemeral range (Linux's default when it
// cannot be read).
func ephemeralStart() int {
	start := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var end int
		if _, err := fmt.Sscan(string(b), &start, &end); err != nil || start <= lowest {
			start = 32768
		}
	}
	return start
}
