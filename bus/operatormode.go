package bus

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// ErrOperatorMode is an accounts-file operation on a bus in operator mode: its accounts live in
// account JWTs pushed to its resolver, and it has no accounts file to check or reload.
var ErrOperatorMode = errors.New("the bus runs in operator mode: its accounts are JWTs pushed to its resolver, not an accounts file")

// OperatorMode is what a server in operator mode is configured with: the operator it trusts,
// the operator's system account, and the account JWTs it holds before any push. With it, the
// server's config is static: every account change is a JWT pushed over the system account to
// the server's NATS resolver, which nothing reloads.
type OperatorMode struct {
	// OperatorJWT is the operator's JWT. A server reads it at start only: another operator
	// needs a restart.
	OperatorJWT string
	// SystemAccount is the public key (A…) of the operator's system account.
	SystemAccount string
	// Preload are account JWTs a server stores in its resolver directory as it starts, each
	// unless the directory holds one of the account as new already (so a restart never takes
	// an account back to an older JWT). The system account's must be among them: every push
	// comes over the system account, so no push can bring it.
	Preload []string
}

// Statements are the server config statements of operator mode, one value each: `operator`,
// `system_account`, the NATS resolver (`resolver { type: full }`) keeping account JWTs in
// resolverDir and asking a peer every interval (a Go duration, "2m") for those it lacks, and
// `resolver_preload` with the system account's JWT first. allow_delete is false: a deleted
// account leaves no tombstone, so a peer's next answer would bring it back anyway. A value the
// server would refuse, or start on without its system account, is an error.
func (m OperatorMode) Statements(resolverDir, interval string) ([]string, error) {
	op, err := jwt.DecodeOperatorClaims(m.OperatorJWT)
	if err != nil {
		return nil, fmt.Errorf("operator mode: reading the operator's JWT: %w", err)
	}
	if !nkeys.IsValidPublicAccountKey(m.SystemAccount) {
		return nil, fmt.Errorf("operator mode: the system account %q is not an account public key", m.SystemAccount)
	}
	// The server refuses a system account the operator's JWT names otherwise.
	if op.SystemAccount != "" && op.SystemAccount != m.SystemAccount {
		return nil, fmt.Errorf("operator mode: the system account is %s, but operator %s names %s", m.SystemAccount, op.Subject, op.SystemAccount)
	}
	if resolverDir == "" {
		return nil, errors.New("operator mode: no resolver directory given")
	}
	if d, err := time.ParseDuration(interval); err != nil || d <= 0 {
		return nil, fmt.Errorf("operator mode: the resolver's interval %q is not a positive duration", interval)
	}
	var system string
	var others []string
	seen := map[string]bool{}
	for _, token := range m.Preload {
		c, err := jwt.DecodeAccountClaims(token)
		if err != nil {
			return nil, fmt.Errorf("operator mode: reading a preloaded account JWT: %w", err)
		}
		if seen[c.Subject] {
			return nil, fmt.Errorf("operator mode: account %s is preloaded twice", c.Subject)
		}
		seen[c.Subject] = true
		// Account keys are base32, so a key is written unquoted, as nsc writes it.
		entry := "  " + c.Subject + ": " + confQuote(token)
		if c.Subject == m.SystemAccount {
			system = entry
		} else {
			others = append(others, entry)
		}
	}
	if system == "" {
		return nil, fmt.Errorf("operator mode: the system account %s's JWT is not preloaded: a server would start without it and take no push", m.SystemAccount)
	}
	return []string{
		"operator: " + confQuote(m.OperatorJWT),
		"system_account: " + confQuote(m.SystemAccount),
		fmt.Sprintf("resolver {\n  type: full\n  dir: %s\n  allow_delete: false\n  interval: %s\n}", confQuote(resolverDir), confQuote(interval)),
		"resolver_preload {\n" + strings.Join(append([]string{system}, others...), "\n") + "\n}",
	}, nil
}
