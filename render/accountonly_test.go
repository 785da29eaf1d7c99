package render

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/meshbus/meshctl/model"
)

// sharedServerConf is an operator's server config whose own accounts block holds an account
// of its own, OTHER, a system account with its own user, and includes file (a path relative
// to dir, as include takes it): the config of a
// bus meshctl shares under bus.accounts: account.
func sharedServerConf(dir, file string) string {
	return fmt.Sprintf(`listen: "127.0.0.1:-1"
jetstream { store_dir: %q }
accounts {
  OTHER { users: [ { user: other, password: other-password } ] }
  SYS { users: [ { user: ops, password: ops-password } ] }
  include %q
}
system_account: SYS
`, filepath.Join(dir, "js"), file)
}

func TestTheAccountAloneIsTheWholeBlockLineForLine(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"seed", "quickstart"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := Derive(mustLoad(t, filepath.Join("..", "examples", name)))
			whole := AccountsConfig(d.Principals, map[string]string{ControllerUser: "$2a$11$" + strings.Repeat("c", 53)})
			// What a file is stamped with: a comment ahead of the rendering.
			whole = append([]byte("# meshctl manager: {}\n"), whole...)
			alone, ok := AccountOnly(whole)
			if !ok {
				t.Fatal("AccountOnly refused a rendering of the mesh's account alone")
			}
			if bytes.Contains(alone, []byte("\n"+blockOpen)) {
				t.Errorf("the account alone still opens an accounts block:\n%s", alone)
			}
			if got, want := bytes.Count(alone, []byte("\n")), bytes.Count(whole, []byte("\n"))-1; got != want {
				t.Errorf("the account alone has %d lines, the whole block %d and its closing line: lines would not match", got, want+1)
			}
			back, ok := WholeBlock(alone)
			if !ok || !bytes.Equal(back, whole) {
				t.Errorf("WholeBlock(AccountOnly(x)) is not x (ok %v):\n%s", ok, back)
			}
			if !bytes.Equal(WithinAccounts(alone), whole) {
				t.Error("WithinAccounts of a file AccountOnly wrote is not its whole block")
			}
			if _, ok := WholeBlock(whole); ok {
				t.Error("WholeBlock took the whole block for a file of the account alone")
			}
		})
	}
}

func TestTheAccountAloneCarriesNoSystemUser(t *testing.T) {
	t.Parallel()
	m := mustLoad(t, "../examples/seed")
	m.Bus.Servers = []model.Server{{Reload: model.Reload{System: true}}}
	d := Derive(m)
	if _, ok := d.Principal(SystemUser); !ok {
		t.Fatal("the mesh has no system user to test with")
	}
	if alone, ok := AccountOnly(AccountsConfig(d.Principals, nil)); ok {
		t.Fatalf("AccountOnly kept a rendering with meshctl's system user, in another account than the mesh's:\n%s", alone)
	}
	m.Bus.Accounts = model.AccountsAccount
	if _, ok := Derive(m).Principal(SystemUser); ok {
		t.Error("under bus.accounts: account the derivation still mints meshctl's system user")
	}
}

func TestGoldenAccountAlone(t *testing.T) {
	t.Parallel()
	d := Derive(mustLoad(t, "../examples/quickstart"))
	alone, ok := AccountOnly(AccountsConfig(d.Principals, map[string]string{ControllerUser: "$2a$11$" + strings.Repeat("c", 53)}))
	if !ok {
		t.Fatal("AccountOnly refused the quickstart's rendering")
	}
	golden(t, filepath.Join("testdata", "golden", "quickstart-account.conf"), alone)
}

// The server's own parser reads the account alone where the operator's config includes it,
// inside its accounts block beside OTHER and SYS, and refuses it included at the top level:
// what WithinAccounts checks is what the server reads, and an error names the same line.
func TestTheServerReadsTheAccountAloneInsideItsAccountsBlock(t *testing.T) {
	t.Parallel()
	d := Derive(mustLoad(t, "../examples/seed"))
	alone, ok := AccountOnly(AccountsConfig(d.Principals, nil))
	if !ok {
		t.Fatal("AccountOnly refused the seed's rendering")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "mesh-account.conf")
	conf := filepath.Join(dir, "server.conf")
	write := func(path string, data []byte) {
		t.Helper()
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(file, alone)
	write(conf, []byte(sharedServerConf(dir, filepath.Base(file))))
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("the server's parser refused the account alone inside its accounts block: %v", err)
	}
	accountOf := map[string]string{}
	for _, u := range opts.Users {
		accountOf[u.Username] = u.Account.Name
	}
	for user, want := range map[string]string{ControllerUser: Account, "two.audit": Account, "other": "OTHER", "ops": "SYS"} {
		if accountOf[user] != want {
			t.Errorf("user %s is in account %q, want %q", user, accountOf[user], want)
		}
	}
	if opts.SystemAccount != "SYS" {
		t.Errorf("the system account is %q, want the operator's SYS", opts.SystemAccount)
	}
	mine := &server.Options{}
	if err := mine.ProcessConfigString(string(WithinAccounts(alone))); err != nil {
		t.Fatalf("WithinAccounts does not parse: %v", err)
	}
	if len(mine.Users) != len(d.Principals) {
		t.Errorf("WithinAccounts reads %d users, the mesh has %d principals", len(mine.Users), len(d.Principals))
	}

	// A line broken in the file is named at the same line whichever way it is read.
	lines := strings.SplitAfter(string(alone), "\n")
	bad := len(lines) / 2
	lines[bad] = "      { user: \"broken\n"
	broken := []byte(strings.Join(lines, ""))
	write(file, broken)
	_, included := server.ProcessConfigFile(conf)
	checked := (&server.Options{}).ProcessConfigString(string(WithinAccounts(broken)))
	if included == nil || checked == nil {
		t.Fatalf("a broken line parsed: included %v, checked %v", included, checked)
	}
	where := fmt.Sprintf("line %d:", bad+1)
	if !strings.Contains(included.Error(), where) || !strings.Contains(checked.Error(), where) {
		t.Errorf("the parser names another line than %s: included %q, checked %q", where, included, checked)
	}

	// A MESH of the operator's own before the include is replaced by meshctl's without a word:
	// the parser keeps the last definition of an account (docs/shared-bus.md).
	write(file, alone)
	write(conf, []byte(strings.Replace(sharedServerConf(dir, filepath.Base(file)), "  include",
		"  MESH { users: [ { user: operators-own, password: x } ] }\n  include", 1)))
	opts, err = server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("the parser refused a second MESH: %v", err)
	}
	for _, u := range opts.Users {
		if u.Username == "operators-own" {
			t.Error("the operator's own MESH kept its user beside meshctl's: docs/shared-bus.md says otherwise")
		}
	}

	// Included at the top level, where a whole block would be, it is refused.
	write(file, alone)
	write(conf, fmt.Appendf(nil, "listen: \"127.0.0.1:-1\"\ninclude %q\n", filepath.Base(file)))
	if _, err := server.ProcessConfigFile(conf); err == nil {
		t.Error("the account alone included at the top level parsed: the server would serve it as no account at all")
	}
}
