package replica

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// OldestServer is the oldest nats-server release that can hold the store: every write expects
// the fence key's last sequence (Nats-Expected-Last-Subject-Sequence-Subject, nats-server
// 2.11), and an older server, not knowing the header, compares the sequence with the written
// key's own and refuses every write as if another meshctl had fenced the bucket.
const OldestServer = "2.11.0"

// supported refuses a server older than OldestServer, naming it and its release, before any
// write could fail for a reason that reads like another writer's.
func supported(nc *nats.Conn) error {
	if nc == nil {
		return nil
	}
	v := nc.ConnectedServerVersion()
	if v == "" || !older(v, OldestServer) {
		return nil
	}
	return fmt.Errorf("the server at %s is nats-server %s; the store on the bus needs %s or newer (upgrade the server, or keep the mesh on the embedded bus)",
		nc.ConnectedUrlRedacted(), v, OldestServer)
}

// older reports whether release a is older than b, both "major.minor.patch" with an optional
// "-suffix" (a pre-release of a release is older than it); a version that does not parse is
// not older.
func older(a, b string) bool {
	pa, oka := release(a)
	pb, okb := release(b)
	if !oka || !okb {
		return false
	}
	for i := range pa {
		if pa[i] != pb[i] {
			return pa[i] < pb[i]
		}
	}
	return strings.Contains(a, "-") && !strings.Contains(b, "-")
}

func release(v string) ([3]int, bool) {
	var r [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexByte(v, '-'); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return r, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return r, false
		}
		r[i] = n
	}
	return r, true
}
