package testnats

import (
	"os"
	"testing"
)

// A process that removes the built server and asks for it again gets one that exists: the
// benchmark driver does so between its phases, each removing what it used.
func TestABuiltServerRemovedIsBuiltAgain(t *testing.T) {
	if os.Getenv(TestServerEnv) != "" {
		t.Skipf("%s names the server: nothing is built", TestServerEnv)
	}
	first := NATSServerBinary(t)
	if _, err := os.Stat(first); err != nil {
		t.Fatalf("the built server: %v", err)
	}
	RemoveBuiltServer()
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Fatalf("the removed server is still at %s: %v", first, err)
	}
	again := NATSServerBinary(t)
	t.Cleanup(RemoveBuiltServer)
	if _, err := os.Stat(again); err != nil {
		t.Fatalf("asked for again after its removal, the server is at %s: %v", again, err)
	}
}
