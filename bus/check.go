package bus

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// CheckConfig parses a server config file, and everything it includes, with the server's own
// parser — what `nats-server -t -c path` does. The error carries the parser's file:line:col.
// Checking before replacing the live file is what keeps a bad render from becoming a server that
// refuses its next reload or, worse, its next start.
func CheckConfig(path string) error {
	if _, err := server.ProcessConfigFile(path); err != nil {
		return fmt.Errorf("the bus would refuse %s: %w", path, err)
	}
	return nil
}

// CheckAccounts checks an accounts config as the server would read it: as the include of a server
// config with a jetstream block and a listen address, like the live one. The two files are
// written to a temporary directory inside dir — on the live file's filesystem, and named
// accounts.conf and server.conf so the parser's messages read like the live file's — and removed
// before it returns, whether it returns or panics. The accounts text must be self-contained
// (render's is): an include inside it would resolve against the temporary directory.
//
// A failure to write the copy (a full disk) is said as that, not as the parser refusing the
// config: only ErrRefusedByParser (wrapped) means the server would refuse it.
func CheckAccounts(accounts []byte, dir string) error {
	// Named with this process's pid, so RemoveStaleChecks can tell a killed run's directory
	// from one a running check is using.
	tmp, err := os.MkdirTemp(dir, fmt.Sprintf("%s%d-", checkDirPrefix, os.Getpid()))
	if err != nil {
		return fmt.Errorf("checking the accounts config: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, accountsConfName), accounts, 0o600); err != nil {
		return fmt.Errorf("checking the accounts config: writing a copy to check: %w", err)
	}
	// The store directory is only parsed, never created: ProcessConfigFile does not start
	// JetStream.
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream {\n  store_dir: %s\n}\ninclude %s\n",
		confQuote(filepath.Join(dir, jetStreamDirName)), confQuote(accountsConfName))
	confPath := filepath.Join(tmp, serverConfName)
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("checking the accounts config: writing a copy to check: %w", err)
	}
	if _, err := server.ProcessConfigFile(confPath); err != nil {
		return fmt.Errorf("%w, so it was not installed: %w", ErrRefusedByParser, err)
	}
	return nil
}

// ErrRefusedByParser means the server's own parser refuses a rendered accounts config.
var ErrRefusedByParser = errors.New("the bus would refuse the rendered accounts config")

// checkDirPrefix starts the name of every temporary directory CheckAccounts makes, followed by
// the pid of the process that made it.
const checkDirPrefix = ".accounts-check-"

// RemoveStaleChecks removes the temporary directories CheckAccounts left in dir when its
// process was killed mid-check (each holds a copy of every password hash): those named with
// the pid of a process that is no longer running, and those in the older form that names
// none. A check in progress in a live process is left alone. It returns what it removed.
func RemoveStaleChecks(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("looking for checks left by a killed run in %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), checkDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		if pid, _, named := strings.Cut(rest, "-"); named {
			if n, err := strconv.Atoi(pid); err == nil && processAlive(n) {
				continue
			}
		}
		path := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, path)
	}
	return removed, errors.Join(errs...)
}
