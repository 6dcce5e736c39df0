// Package freeport finds free loopback ports for the servers that tests, the lab and the load
// tool start themselves (ZooKeeper, redis-server).
package freeport

import "net"

// Ports returns n loopback ports that were free a moment ago. They are held open together, so
// that the n are distinct; another process may still take one before its server binds it.
func Ports(n int) ([]int, error) {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
