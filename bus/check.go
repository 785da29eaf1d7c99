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
// config with a jetstream block (its store under dir) and a listen address, like the live one.
//
// It is parsed in memory (Options.ProcessConfigString), not from files: ProcessConfigFile also
// computes a digest of the whole parsed config, which a check throws away and which costs as
// much again as the parse at 28,001 users, and writing a copy of every hash to disk to check it
// was a copy to clean up after a killed run. It is parsed as the embedded bus parses its own
// (serverConfig.options), so a line the parser names is the line of the accounts text. Only
// ErrRefusedByParser (wrapped) is returned: the server would refuse the config. The embedded
// bus checks with its own settings, and keeps the parse for its reload (Embedded.CheckAccounts).
func CheckAccounts(accounts []byte, dir string) error {
	conf := serverConfig{settings: []string{`listen: "127.0.0.1:-1"`, jetStreamSetting(dir)}}
	if _, err := conf.options(accounts); err != nil {
		return refusedByParser(err)
	}
	return nil
}

// refusedByParser is the parser's refusal of an accounts config, as CheckAccounts returns it.
func refusedByParser(err error) error {
	return fmt.Errorf("%w, so it was not installed: %s: %w", ErrRefusedByParser, accountsConfName, err)
}

// ErrRefusedByParser means the server's own parser refuses a rendered accounts config.
var ErrRefusedByParser = errors.New("the bus would refuse the rendered accounts config")

// checkDirPrefix starts the name of every temporary directory a check from files made (meshctl
// releases that checked a copy on disk), followed by the pid of the process that made it.
const checkDirPrefix = ".accounts-check-"

// RemoveStaleChecks removes the temporary directories a check from files left in dir when its
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
			if n, err := strconv.Atoi(pid); err == nil && ProcessAlive(n) {
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
