package bus

import (
	"bytes"
	"context"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/atomicfile"
)

// splitTestAccounts splits a config accountsFor wrote into its users' entries, as render's
// layout is split for the embedded bus (EmbeddedOptions.Entries).
func splitTestAccounts(conf []byte) (AccountsLayout, bool) {
	const listStart, start, end, tail = "    users = [\n", "      { user: \"", "\n      } }\n", "    ]\n  }\n}\n"
	i := bytes.Index(conf, []byte(listStart))
	if i < 0 || !bytes.HasSuffix(conf, []byte(tail)) {
		return AccountsLayout{}, false
	}
	l := AccountsLayout{Head: conf[:i+len(listStart)], Tail: conf[len(conf)-len(tail):]}
	for body := conf[i+len(listStart) : len(conf)-len(tail)]; len(body) > 0; {
		j := bytes.Index(body, []byte(end))
		if !bytes.HasPrefix(body, []byte(start)) || j < 0 {
			return AccountsLayout{}, false
		}
		text := body[:j+len(end)]
		name, _, _ := bytes.Cut(text[len(start):], []byte(`"`))
		l.Entries = append(l.Entries, AccountsEntry{Text: text, User: string(name)})
		body = body[len(text):]
	}
	return l, true
}

// A reload parses only the entries that changed since the config the server serves, and the
// options are those of the whole file: the same users, each with the same password,
// permissions and account as a parse of the whole text gives them. The change is live: a user
// whose grants changed has the new ones, a new user logs in, a removed one is refused.
func TestAReloadParsesOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	a := testUser{name: "one.a", password: "pw-a", pub: []string{"mesh.a"}, sub: []string{"_INBOX.one.a.>"}}
	b := testUser{name: "one.b", password: "pw-b", pub: []string{"mesh.b"}, sub: []string{"_INBOX.one.b.>"}}
	c := testUser{name: "one.c", password: "pw-c", pub: []string{"mesh.c"}, sub: []string{"_INBOX.one.c.>"}}
	d := testUser{name: "one.d", password: "pw-d", pub: []string{"mesh.d"}, sub: []string{"_INBOX.one.d.>"}}
	dir := t.TempDir()
	e, err := StartEmbedded(context.Background(), EmbeddedOptions{StateDir: dir, Listen: "127.0.0.1:0",
		InitialAccounts: accountsFor(t, a, b, c), Entries: splitTestAccounts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	if e.served.Load() == nil {
		t.Fatal("the config the bus started from was not kept for the next parse")
	}
	dialAs(t, e.URL(), a)

	// b publishes elsewhere now, c is gone, d is new; a's entry is the same text.
	moved := b
	moved.pub = []string{"mesh.b.moved"}
	before, err := os.ReadFile(e.AccountsFile())
	if err != nil {
		t.Fatal(err)
	}
	aEntry := bytes.Index(before, []byte(`"one.a"`))
	next := accountsFor(t, moved, d)
	next = append(append(append([]byte{}, next[:bytes.Index(next, []byte("      { user: "))]...),
		before[bytes.LastIndex(before[:aEntry], []byte("      { user: ")):bytes.Index(before[aEntry:], []byte("\n      } }\n"))+aEntry+len("\n      } }\n")]...),
		next[bytes.Index(next, []byte("      { user: ")):]...)
	layout, ok := splitTestAccounts(next)
	if !ok || len(layout.Entries) != 3 {
		t.Fatalf("the test's config does not split into three entries:\n%s", next)
	}

	whole, err := e.conf.options(next)
	if err != nil {
		t.Fatal(err)
	}
	partial, reused := e.conf.parseChanged(layout, e.served.Load())
	if !reused {
		t.Fatal("a config whose head and tail are the same was parsed whole")
	}
	if got, want := accountsOf(partial), accountsOf(whole); !reflect.DeepEqual(got, want) {
		t.Errorf("the users parsed from what changed differ from a whole parse's:\n%+v\nwant\n%+v", got, want)
	}
	kept := e.served.Load().users[a.name]
	var found bool
	for _, u := range partial.Users {
		found = found || u == kept
	}
	if !found {
		t.Error("the unchanged entry was parsed again, not taken from the last parse")
	}

	if err := atomicfile.Write(e.AccountsFile(), next); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	dialAs(t, e.URL(), a)
	dialAs(t, e.URL(), d)
	bc := dialAs(t, e.URL(), moved)
	if err := bc.Publish(b.pub[0], []byte("x")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := bc.WaitViolation(ctx, b.pub[0]); err != nil {
		t.Errorf("b still publishes to %s after the reload took its grant away: %v", b.pub[0], err)
	}
	if _, err := busclient.Dial(context.Background(), busclient.Target{URL: e.URL()}, busclient.Credential{User: c.name, Password: c.password}); err == nil {
		t.Error("the removed user still logs in")
	}
}

// A config whose text before or after the entries changed, or that does not split, is
// parsed whole; and so is one whose changed entries define a user the kept ones define too,
// which the whole text's parse refuses.
func TestAReloadParsesWholeWhatItCannotSplit(t *testing.T) {
	t.Parallel()
	a := testUser{name: "one.a", password: "pw-a", pub: []string{"mesh.a"}, sub: []string{"_INBOX.one.a.>"}}
	b := testUser{name: "one.b", password: "pw-b", pub: []string{"mesh.b"}, sub: []string{"_INBOX.one.b.>"}}
	dir := t.TempDir()
	e, err := StartEmbedded(context.Background(), EmbeddedOptions{StateDir: dir, Listen: "127.0.0.1:0",
		InitialAccounts: accountsFor(t, a, b), Entries: splitTestAccounts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	served := e.served.Load()
	conf, err := os.ReadFile(e.AccountsFile())
	if err != nil {
		t.Fatal(err)
	}
	headChanged := bytes.Replace(conf, []byte("jetstream: enabled"), []byte("jetstream: enabled\n    # a comment"), 1)
	if l, ok := splitTestAccounts(headChanged); !ok {
		t.Fatal("the edited config does not split")
	} else if _, reused := e.conf.parseChanged(l, served); reused {
		t.Error("a config whose head changed was parsed in part")
	}
	// b's entry rewritten to define a second a, beside the a kept.
	twice := bytes.Replace(conf, []byte(`{ user: "one.b"`), []byte(`{ user: "one.a"`), 1)
	l, ok := splitTestAccounts(twice)
	if !ok {
		t.Fatal("the edited config does not split")
	}
	l.Entries[1].User = b.name // as a layout that names it by something else would
	if _, reused := e.conf.parseChanged(l, served); reused {
		t.Error("changed entries defining a kept user were taken")
	}
	if _, err := e.CheckAccounts(twice); !errors.Is(err, ErrRefusedByParser) {
		t.Errorf("a config with a user twice checked as %v; want the parser's refusal", err)
	}
}
