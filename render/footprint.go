package render

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/model"
)

// Footprint is the most a mesh's streams may hold on each server: the sum of their byte
// limits, on disk and in memory. A server keeps at most one replica of a stream, so the sum is
// what any one server may be asked to hold, whatever the replicas. A stream without a byte
// limit makes the sum unbounded: it is named in Unlimited, and counted in neither sum.
type Footprint struct {
	File      uint64   `json:"file"`
	Memory    uint64   `json:"memory"`
	Unlimited []string `json:"unlimited,omitempty"`
}

// FootprintOf sums the byte limits of streams, as Footprint says.
func FootprintOf(streams []jetstream.StreamConfig) Footprint {
	var f Footprint
	for _, s := range streams {
		if s.MaxBytes <= 0 {
			f.Unlimited = append(f.Unlimited, s.Name)
			continue
		}
		if s.Storage == jetstream.MemoryStorage {
			f.Memory += uint64(s.MaxBytes)
		} else {
			f.File += uint64(s.MaxBytes)
		}
	}
	return f
}

// Bounded reports whether every stream has a byte limit.
func (f Footprint) Bounded() bool { return len(f.Unlimited) == 0 }

// String says the footprint in a sentence, as validate and diff print it: "this mesh may hold
// up to 1.4 GiB on each server (on disk)".
func (f Footprint) String() string {
	var parts []string
	if f.File > 0 || f.Memory == 0 {
		parts = append(parts, model.HumanSize(f.File)+" on disk")
	}
	if f.Memory > 0 {
		parts = append(parts, model.HumanSize(f.Memory)+" in memory")
	}
	held := strings.Join(parts, " and ")
	if f.Bounded() {
		return "this mesh may hold up to " + held + " on each server"
	}
	names := f.Unlimited
	if len(names) > 3 {
		names = append(names[:3:3], fmt.Sprintf("%d more", len(f.Unlimited)-3))
	}
	return fmt.Sprintf("this mesh may hold an unbounded amount on each server: %s %s no byte limit (max_bytes: unlimited), the other streams up to %s",
		strings.Join(names, ", "), map[bool]string{true: "has", false: "have"}[len(f.Unlimited) == 1], held)
}
