package opmode

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/meshbus/meshctl/internal/testnats"
)

// NatsCLIVersion is the natscli release the tests make operators with: the one whose
// `nats auth` commands keep nsc's store layout, which the store paths here follow.
const NatsCLIVersion = "v0.5.0"

var (
	cliOnce  sync.Once
	cliBin   string
	cliError error
)

// NatsCLIBinary is the nats CLI at NatsCLIVersion, built with `go install` from the module
// proxy into a directory under os.TempDir named by the release, so that the minutes its first
// build takes are spent once per machine rather than once per test process, and natscli never
// enters meshctl's go.mod. The binary is moved into place whole, so two test processes building
// at once both end with a complete one.
func NatsCLIBinary(tb testnats.TB) string {
	tb.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("the go command is not on PATH, so the nats CLI cannot be built")
	}
	cliOnce.Do(func() { cliBin, cliError = buildNatsCLI(goBin) })
	if cliError != nil {
		tb.Fatalf("building the nats CLI %s: %v", NatsCLIVersion, cliError)
	}
	return cliBin
}

func buildNatsCLI(goBin string) (string, error) {
	dir := filepath.Join(os.TempDir(), "meshctl-natscli-"+NatsCLIVersion)
	bin := filepath.Join(dir, "nats")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o100 != 0 {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command(goBin, "install", "github.com/nats-io/natscli/nats@"+NatsCLIVersion)
	// Outside any module and with the caller's GOFLAGS dropped: `go install pkg@version`
	// builds natscli against its own go.mod, never meshctl's.
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New(err.Error() + ": " + string(out))
	}
	if err := os.Rename(filepath.Join(tmp, "nats"), bin); err != nil {
		return "", err
	}
	return bin, nil
}
