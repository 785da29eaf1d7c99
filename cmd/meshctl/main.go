// Command meshctl reconciles a NATS JetStream bus with a mesh described in YAML.
package main

import "os"

func main() {
	exitsAfterCommand = true
	if len(os.Args) < 2 || !commands[os.Args[1]].runsLong {
		oneShotGC()
	}
	os.Exit(runWithSignals(os.Args[1:], os.Stdout, os.Stderr))
}
