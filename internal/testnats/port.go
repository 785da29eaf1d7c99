package testnats

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// Ports for servers a test starts are drawn from below the kernel's ephemeral range (Linux's
// default is 32768–60999). A port the kernel hands out for `:0` can be handed out again at
// once to any process's outgoing connection, so a server started on it moments later may find
// it taken, or a test may dial a stranger. No outgoing connection takes a port below the
// range, and a port is checked free and never handed out twice by this process.
const (
	portLow  = 20000
	portHigh = 32000
)

var (
	portsMu sync.Mutex
	given   = map[int]bool{}
)

// FreePort is a loopback TCP port that nothing listens on and no outgoing connection will
// take, for a server the test starts (and may stop and start again on the same port).
func FreePort(tb TB) int {
	tb.Helper()
	return FreePorts(tb, 1)[0]
}

// FreePorts is n distinct FreePort ports.
func FreePorts(tb TB, n int) []int {
	tb.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 10000 {
			tb.Fatalf("no free port between %d and %d", portLow, portHigh)
		}
		p := portLow + rand.IntN(portHigh-portLow)
		if given[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		given[p] = true
		ports = append(ports, p)
	}
	return ports
}
