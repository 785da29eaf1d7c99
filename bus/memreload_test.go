package bus

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/internal/testnats"
)

// The embedded bus reloads from memory: its options must be those a reload of server.conf
// from file would produce, or the server would apply — or refuse — a difference nobody wrote.
// Compared field by field as the server's own diffOptions compares them (exported fields only;
// the config digest a file reload computes is unexported and ignored by it), with TLS
// configured so that every statement of server.conf is read.
func TestTheInMemoryConfigIsTheFilesConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, _ := testnats.SelfSignedCert(t, dir)
	u := testUser{name: "one.a", password: "pw-a", pub: []string{"mesh.a"}, sub: []string{"_INBOX.one.a.>"}}
	e, err := StartEmbedded(context.Background(), EmbeddedOptions{
		StateDir: dir, Listen: "127.0.0.1:0", ServerName: "mesh-\"one\"", InitialAccounts: accountsFor(t, u),
		TLSCert: certFile, TLSKey: keyFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)

	fromFile, err := server.ProcessConfigFile(e.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	fromFile.NoSigs, fromFile.NoLog = true, true
	// The system account's block is the one thing meshctl adds to what server.conf reads
	// (addSystemAccount): the accounts file's accounts block would replace one written there.
	addSystemAccount(fromFile)
	accounts, err := os.ReadFile(e.AccountsFile())
	if err != nil {
		t.Fatal(err)
	}
	inMemory, err := e.conf.options(accounts)
	if err != nil {
		t.Fatal(err)
	}
	if inMemory.ServerName != `mesh-"one"` || inMemory.StoreDir == "" || inMemory.TLSConfig == nil {
		t.Fatalf("the in-memory parse lost a setting: name %q, store %q, tls %v", inMemory.ServerName, inMemory.StoreDir, inMemory.TLSConfig != nil)
	}
	a, b := reflect.ValueOf(fromFile).Elem(), reflect.ValueOf(inMemory).Elem()
	for i := range a.NumField() {
		f := a.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		x, y := a.Field(i).Interface(), b.Field(i).Interface()
		switch f.Name {
		case "TLSConfig":
			// Each parse builds its own *tls.Config; the certificate in it is what counts.
			x, y = fromFile.TLSConfig.Certificates, inMemory.TLSConfig.Certificates
		case "Accounts", "Users":
			// Accounts carry a creation time and locks; their names, users and permissions count.
			x, y = accountsOf(fromFile), accountsOf(inMemory)
		}
		if !reflect.DeepEqual(x, y) {
			t.Errorf("%s differs: from the file %+v, in memory %+v", f.Name, x, y)
		}
	}
	// The reload from file the server itself may make ($SYS reload, Server.Reload) is refused
	// by nothing either.
	if err := e.Server().Reload(); err != nil {
		t.Fatalf("the server's own reload of server.conf: %v", err)
	}
	if err := e.Reload(); err != nil {
		t.Fatalf("a reload from memory after one from file: %v", err)
	}
}

// accountsOf is what of o's accounts and users a comparison can read: account names, and for
// each user its account, password hash and permissions.
func accountsOf(o *server.Options) map[string]any {
	out := map[string]any{}
	for _, a := range o.Accounts {
		out["account "+a.Name] = true
	}
	for _, u := range o.Users {
		acc := ""
		if u.Account != nil {
			acc = u.Account.Name
		}
		out["user "+u.Username] = []any{acc, u.Password, u.Permissions}
	}
	return out
}

// A change made live from the parse its check made: the new user logs in, the removed one is
// refused, the config load time advances. A config the server refuses — one it cannot parse, or
// one that changes what it cannot reload — is an error, and the users of the config in force
// still log in while those of the refused one do not.
func TestAReloadFromTheChecksParse(t *testing.T) {
	t.Parallel()
	a := testUser{name: "one.a", password: "pw-a", pub: []string{"mesh.a"}, sub: []string{"_INBOX.one.a.>"}}
	b := testUser{name: "one.b", password: "pw-b", pub: []string{"mesh.b"}, sub: []string{"_INBOX.one.b.>"}}
	c := testUser{name: "one.c", password: "pw-c", pub: []string{"mesh.c"}, sub: []string{"_INBOX.one.c.>"}}
	e := startTestBus(t, accountsFor(t, a, b))
	ctx := context.Background()
	dialAs(t, e.URL(), b)

	next := accountsFor(t, a, c)
	reload, err := e.Reloader().(AccountsChecker).CheckAccounts(next)
	if err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(e.AccountsFile(), next); err != nil {
		t.Fatal(err)
	}
	before := e.ConfigLoadTime()
	if err := reload(ctx); err != nil {
		t.Fatal(err)
	}
	if after := e.ConfigLoadTime(); !after.After(before) {
		t.Fatalf("config load time %v did not advance past %v", after, before)
	}
	dialAs(t, e.URL(), c)
	refused(t, e, b)

	// A syntax error is refused by the check, and by a reload of the file holding it.
	broken := append(accountsFor(t, a), "accounts { MESH { users = [ { user: \"x\" \n"...)
	if _, err := e.CheckAccounts(broken); !errors.Is(err, ErrRefusedByParser) {
		t.Fatalf("checking a broken config: got %v, want ErrRefusedByParser", err)
	}
	loaded := e.ConfigLoadTime()
	if err := atomicfile.Write(e.AccountsFile(), broken); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(); err == nil {
		t.Fatal("a reload of a config that does not parse succeeded")
	} else {
		t.Logf("a broken config's reload reads: %v", err)
	}
	stillServed(t, e, loaded, []testUser{a, c}, b)

	// The parse succeeds, and the server refuses what it cannot reload: a server name set in
	// the accounts file, which comes after server.conf's own.
	renamed := append([]byte("server_name: \"another\"\n"), accountsFor(t, b)...)
	checked, err := e.CheckAccounts(renamed)
	if err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(e.AccountsFile(), renamed); err != nil {
		t.Fatal(err)
	}
	if err := checked.Reload(ctx); err == nil || !strings.Contains(err.Error(), "not supported for ServerName") {
		t.Fatalf("a reload changing the server name: got %v, want the server's refusal", err)
	}
	stillServed(t, e, loaded, []testUser{a, c}, b)
}

// What the server serves is the file on disk: a reload after the file was rewritten since its
// check reads the file, not the checked parse; a second reload of one check reads the file too.
func TestACheckedReloadServesTheFileOnDisk(t *testing.T) {
	t.Parallel()
	a := testUser{name: "one.a", password: "pw-a", pub: []string{"mesh.a"}, sub: []string{"_INBOX.one.a.>"}}
	b := testUser{name: "one.b", password: "pw-b", pub: []string{"mesh.b"}, sub: []string{"_INBOX.one.b.>"}}
	e := startTestBus(t, accountsFor(t, a))
	ctx := context.Background()

	checked, err := e.CheckAccounts(accountsFor(t, a))
	if err != nil {
		t.Fatal(err)
	}
	writeAccounts(t, e.AccountsFile(), accountsFor(t, b))
	if err := checked.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	dialAs(t, e.URL(), b)
	refused(t, e, a)

	withA := accountsFor(t, a)
	if checked, err = e.CheckAccounts(withA); err != nil {
		t.Fatal(err)
	}
	writeAccounts(t, e.AccountsFile(), withA)
	if err := checked.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	dialAs(t, e.URL(), a)
	writeAccounts(t, e.AccountsFile(), accountsFor(t, b))
	if err := checked.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	dialAs(t, e.URL(), b)
	refused(t, e, a)
}

// stillServed fails t unless the bus is still on the config it loaded at loaded: its load time
// has not moved, every one of users logs in, and gone does not.
func stillServed(t *testing.T, e *Embedded, loaded time.Time, users []testUser, gone testUser) {
	t.Helper()
	if !e.ConfigLoadTime().Equal(loaded) {
		t.Fatalf("a refused reload moved the config load time from %v to %v", loaded, e.ConfigLoadTime())
	}
	for _, u := range users {
		dialAs(t, e.URL(), u)
	}
	refused(t, e, gone)
}

// refused fails t unless u's login is refused.
func refused(t *testing.T, e *Embedded, u testUser) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := busclient.Dial(ctx, busclient.Target{URL: e.URL()}, busclient.Credential{User: u.name, Password: u.password})
	if err == nil {
		c.Close()
		t.Fatalf("%s logged in, and the config in force does not have it", u.name)
	}
}
