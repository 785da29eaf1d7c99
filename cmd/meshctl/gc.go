package main

import (
	"os"
	"runtime/debug"

	"github.com/meshbus/meshctl/model"
)

// The garbage collector's pace for a command that runs once and exits. Such a command's heap
// is what it holds to plan — the description, the bus as read, what is derived from the one to
// compare with the other — all of it alive until the plan is made and gone at exit, and the
// pace sets how far the heap grows past that before it is collected: to (1 + pace/100) times
// it. A large heap grows far: at 20,000 module instances, about 45 MB live, a converged diff
// peaked at 150–180 MB of memory at a pace of 400, and under 100 MB at 50, for a tenth more
// CPU. Collecting a small heap often is work thrown away: at 5,000 instances, about 13 MB
// live, the same diff took 0.22 s at 400 and 0.24–0.26 s at 50 to 100, for 65 MB of memory
// rather than 45–50. So a one-shot command starts at oneShotGCPercent, the bus being read
// beside the description before its size is known, and a description of at most smallMesh
// instances, once loaded, sets smallMeshGCPercent (paceFor).
const (
	oneShotGCPercent   = 50
	smallMeshGCPercent = 400
	smallMesh          = 5000
)

// paced says the pace is gc.go's to set: a one-shot command, and no GOGC of the operator's.
var paced bool

// oneShotGC sets the one-shot pace, unless the operator set GOGC, which is theirs to decide.
func oneShotGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(oneShotGCPercent)
		paced = true
	}
}

// paceFor sets the pace for the description m, once loaded.
func paceFor(m *model.Mesh) {
	if !paced {
		return
	}
	instances := 0
	for _, mod := range m.Modules {
		instances += len(mod.On)
	}
	if instances <= smallMesh {
		debug.SetGCPercent(smallMeshGCPercent)
	}
}
