package bus

import (
	"fmt"
	"os"
	"path/filepath"

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
// before it returns. The accounts text must be self-contained (render's is): an include inside it
// would resolve against the temporary directory.
func CheckAccounts(accounts []byte, dir string) error {
	tmp, err := os.MkdirTemp(dir, ".accounts-check-")
	if err != nil {
		return fmt.Errorf("checking the accounts config: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, accountsConfName), accounts, 0o600); err != nil {
		return fmt.Errorf("checking the accounts config: %w", err)
	}
	// The store directory is only parsed, never created: ProcessConfigFile does not start
	// JetStream.
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream {\n  store_dir: %s\n}\ninclude %s\n",
		confQuote(filepath.Join(dir, jetStreamDirName)), confQuote(accountsConfName))
	confPath := filepath.Join(tmp, serverConfName)
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("checking the accounts config: %w", err)
	}
	if _, err := server.ProcessConfigFile(confPath); err != nil {
		return fmt.Errorf("the bus would refuse the accounts config: %w", err)
	}
	return nil
}
