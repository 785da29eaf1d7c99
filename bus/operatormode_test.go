package bus

import (
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// testOperatorMode is an operator, its system account and one more account, signed as the
// servers trust them.
func testOperatorMode(t *testing.T) (m OperatorMode, other string) {
	t.Helper()
	op, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	opPub, _ := op.PublicKey()
	account := func() (string, string) {
		kp, err := nkeys.CreateAccount()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		token, err := jwt.NewAccountClaims(pub).Encode(op)
		if err != nil {
			t.Fatal(err)
		}
		return pub, token
	}
	sysPub, sysJWT := account()
	otherPub, otherJWT := account()
	oc := jwt.NewOperatorClaims(opPub)
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	return OperatorMode{OperatorJWT: opJWT, SystemAccount: sysPub, Preload: []string{otherJWT, sysJWT}}, otherPub
}

// The statements are what the server's own parser reads as operator mode: the operator
// trusted, the system account, a full NATS resolver in the directory given, and both accounts
// preloaded, the system account's first.
func TestOperatorModeStatementsAreReadByTheServer(t *testing.T) {
	t.Parallel()
	m, other := testOperatorMode(t)
	dir := t.TempDir()
	statements, err := m.Statements(dir, "2m")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(statements, "\n")
	if i, j := strings.Index(text, m.SystemAccount+": "), strings.Index(text, other+": "); i < 0 || j < i {
		t.Errorf("the system account is not preloaded first:\n%s", text)
	}
	opts := &server.Options{}
	if err := opts.ProcessConfigString(text); err != nil {
		t.Fatalf("the server refuses the statements: %v\n%s", err, text)
	}
	if len(opts.TrustedOperators) != 1 || opts.SystemAccount != m.SystemAccount {
		t.Errorf("trusted operators %d, system account %q", len(opts.TrustedOperators), opts.SystemAccount)
	}
	if _, ok := opts.AccountResolver.(*server.DirAccResolver); !ok {
		t.Errorf("resolver %T; want the NATS resolver (full)", opts.AccountResolver)
	}
}

// Values the server would refuse, or would start on without its system account, are refused
// before any server sees them.
func TestOperatorModeStatementsRefuse(t *testing.T) {
	t.Parallel()
	m, _ := testOperatorMode(t)
	other := m.Preload[0]
	_, stranger := testOperatorMode(t)
	for name, c := range map[string]struct {
		m             OperatorMode
		dir, interval string
	}{
		"no operator JWT":             {OperatorMode{SystemAccount: m.SystemAccount, Preload: m.Preload}, "d", "2m"},
		"an account JWT as operator":  {OperatorMode{OperatorJWT: other, SystemAccount: m.SystemAccount, Preload: m.Preload}, "d", "2m"},
		"a system account not its":    {OperatorMode{OperatorJWT: m.OperatorJWT, SystemAccount: stranger, Preload: m.Preload}, "d", "2m"},
		"the system account unloaded": {OperatorMode{OperatorJWT: m.OperatorJWT, SystemAccount: m.SystemAccount, Preload: []string{other}}, "d", "2m"},
		"an account twice":            {OperatorMode{OperatorJWT: m.OperatorJWT, SystemAccount: m.SystemAccount, Preload: append(m.Preload, other)}, "d", "2m"},
		"a preload not a JWT":         {OperatorMode{OperatorJWT: m.OperatorJWT, SystemAccount: m.SystemAccount, Preload: append(m.Preload, "x")}, "d", "2m"},
		"no resolver directory":       {m, "", "2m"},
		"no interval":                 {m, "d", ""},
		"an interval not a duration":  {m, "d", "2"},
	} {
		if _, err := c.m.Statements(c.dir, c.interval); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
