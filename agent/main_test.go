package agent

import (
	"os"
	"testing"

	"github.com/meshbus/meshctl/internal/testnats"
)

// TestMain removes the nats-server binary a test built (bustest.StartTestServer), so that a
// run leaves nothing behind in the temporary directory.
func TestMain(m *testing.M) {
	code := m.Run()
	testnats.RemoveBuiltServer()
	os.Exit(code)
}
