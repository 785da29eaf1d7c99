package main

import (
	"os"
	"runtime/debug"
)

// oneShotGCPercent is the garbage collector's pace for a command that runs once and exits.
// Such a command's heap is what it read — the description, the bus's pages, the rendered
// accounts config — all of it alive until the plan is made and gone at exit, so collecting
// it at the default pace (100) is work thrown away: measured on a converged diff of a
// 5,000-instance mesh, the process's CPU went from about 0.27 s to 0.22 s, for about 15 MB
// more peak memory (75 MB to 90 MB).
const oneShotGCPercent = 400

// oneShotGC sets that pace, unless the operator set GOGC, which is theirs to decide.
func oneShotGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(oneShotGCPercent)
	}
}
