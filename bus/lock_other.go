//go:build !unix

package bus

// lockDir is a no-op where flock does not exist; bus.json (RunningEmbedded) is then the only
// guard against a second bus on the same state directory.
func lockDir(string) (unlock func(), err error) { return func() {}, nil }
