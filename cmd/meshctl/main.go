// Command meshctl reconciles a NATS JetStream bus with a mesh described in YAML.
package main

import "os"

func main() {
	exitsAfterCommand = true
	os.Exit(runWithSignals(os.Args[1:], os.Stdout, os.Stderr))
}
