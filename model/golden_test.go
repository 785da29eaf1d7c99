package model_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/model"
)

var update = flag.Bool("update", false, "rewrite testdata/*/want.txt from what Load returns now")

// Every directory under testdata (except the fuzzer's corpus) is one case: its *.yaml files
// are a description, want.txt what loading it must give. A case named valid-* must load and
// want.txt is a dump of the mesh; a case named invalid-* must fail and want.txt is the error
// exactly as an operator sees it. The prefix is checked even under -update, so rewriting the
// golden files cannot quietly turn a rejected description into an accepted one.
func TestGolden(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "fuzz" {
			continue
		}
		name := e.Name()
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join("testdata", name)
			var got string
			switch {
			case strings.HasPrefix(name, "valid-"):
				got = loadValid(t, dir)
			case strings.HasPrefix(name, "invalid-"):
				got = loadInvalid(t, dir)
			default:
				t.Fatalf("case %s: name it valid-* or invalid-* so the test knows whether it must load", dir)
			}
			wantPath := filepath.Join(dir, "want.txt")
			if *update {
				if err := os.WriteFile(wantPath, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(wantPath)
			if err != nil {
				t.Fatalf("case %s has no golden file (run go test -update to write it, then review it): %v", dir, err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("Load(%s) differs from %s (-want +got):\n%s", dir, wantPath, diff)
			}
		})
	}
}

// loadValid loads a case that must be accepted and returns the dump of its mesh.
func loadValid(t *testing.T, dir string) string {
	t.Helper()
	m, err := model.Load(dir)
	if err != nil {
		t.Fatalf("Load(%s) must succeed, got:\n%v", dir, err)
	}
	if o := m.Bus.Operator; o != nil {
		// Load makes the operator's paths absolute: the dump shows them relative to the
		// case's directory, the same on every machine.
		root, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []*string{&o.Store, &o.SystemCreds, &o.SigningKey, &o.AccountKey} {
			if *p == "" {
				continue
			}
			if !filepath.IsAbs(*p) {
				t.Fatalf("operator path %q is not absolute", *p)
			}
			if rel, err := filepath.Rel(root, *p); err == nil && !strings.HasPrefix(rel, "..") {
				*p = "<case>/" + filepath.ToSlash(rel)
			}
		}
	}
	return dump(m)
}

// loadInvalid loads a case that must be rejected, checks the error's shape, and returns its
// text. Every diagnostic must point inside a file of the case: a position past the end of
// its line or file would send the operator looking in the wrong place.
func loadInvalid(t *testing.T, dir string) string {
	t.Helper()
	m, err := model.Load(dir)
	if err == nil {
		t.Fatalf("Load(%s) must fail, got a mesh:\n%s", dir, dump(m))
	}
	if m != nil {
		t.Errorf("Load(%s) returned both a mesh and an error", dir)
	}
	if !errors.Is(err, model.ErrInvalid) {
		t.Errorf("Load(%s): errors.Is(err, ErrInvalid) = false for %v", dir, err)
	}
	var lerr *model.LoadError
	if !errors.As(err, &lerr) {
		t.Fatalf("Load(%s) returned %T, want *model.LoadError: %v", dir, err, err)
	}
	for _, d := range lerr.Diagnostics {
		checkInside(t, dir, d)
	}
	return err.Error() + "\n"
}

func checkInside(t *testing.T, dir string, d model.Diagnostic) {
	t.Helper()
	if d.Pos.Line == 0 {
		// About a file or directory as a whole, which must be there (a link, perhaps, whose
		// target is not).
		if d.Pos.Col != 0 {
			t.Errorf("diagnostic %q: a column without a line", d)
		}
		if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(d.Pos.File))); err != nil {
			t.Errorf("diagnostic %q names nothing in the case: %v", d, err)
		}
		return
	}
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(d.Pos.File)))
	if err != nil {
		t.Errorf("diagnostic %q names a file that is not in the case: %v", d, err)
		return
	}
	lines := strings.Split(string(data), "\n")
	if d.Pos.Line < 1 || d.Pos.Line > len(lines) {
		t.Errorf("diagnostic %q: line %d is outside %s (%d lines)", d, d.Pos.Line, d.Pos.File, len(lines))
		return
	}
	if n := len(lines[d.Pos.Line-1]); d.Pos.Col < 1 || d.Pos.Col > n+1 {
		t.Errorf("diagnostic %q: column %d is outside line %d of %s (%d characters)", d, d.Pos.Col, d.Pos.Line, d.Pos.File, n)
	}
}

// dump writes a mesh as text, one declaration per line and each field indented under it,
// with the positions the rest of meshctl reports. Empty fields are left out.
func dump(m *model.Mesh) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	list := func(key string, vals []string) {
		if len(vals) > 0 {
			line("  %s: %s", key, strings.Join(vals, ", "))
		}
	}

	bus := m.Bus
	line("bus @ %s", bus.Pos)
	if bus.Embedded() {
		line("  embedded, listen: %s", bus.Listen)
	} else {
		line("  url: %s", bus.URL)
		if bus.Listen != "" {
			line("  listen: %s", bus.Listen)
		}
	}
	if bus.AllowPlaintextListen {
		line("  allow_plaintext_listen: true")
	}
	if bus.AllowPlaintext {
		line("  allow_plaintext: true")
	}
	if bus.Fingerprint != "" {
		line("  fingerprint: %s", bus.Fingerprint)
	}
	if bus.CAFile != "" {
		line("  ca_file: %s", bus.CAFile)
	}
	if bus.CertFile != "" || bus.KeyFile != "" {
		line("  cert_file: %s key_file: %s", bus.CertFile, bus.KeyFile)
	}
	if bus.AccountsFile != "" {
		line("  accounts_file: %s", bus.AccountsFile)
	}
	if bus.AccountOnly() {
		line("  accounts: %s", bus.Accounts)
	}
	if su := bus.SystemUser; su != nil {
		line("  system_user @ %s: user: %s password_file: %s seed_file: %s", su.Pos, su.User, su.PasswordFile, su.SeedFile)
	}
	line("  replicas: %d", bus.Replicas)
	line("  events_max_age: %s", bus.Streams.Events.MaxAge)
	// The settings, where they are not the defaults: the golden cases written before them
	// keep their dumps.
	defaults := model.DefaultStreams(bus.Replicas)
	defaults.Events.MaxAge = bus.Streams.Events.MaxAge // on its own line above
	for _, s := range []struct {
		name       string
		got, deflt model.StreamSettings
	}{
		{"control", bus.Streams.Control, defaults.Control}, {"events", bus.Streams.Events, defaults.Events},
		{"nodes", bus.Streams.Nodes, defaults.Nodes}, {"seats", bus.Streams.Seats, defaults.Seats},
	} {
		if s.got != s.deflt {
			line("  stream %s: %s", s.name, streamSettings(s.got))
		}
	}
	if !reflect.DeepEqual(bus.ConsumerDefaults, model.DefaultConsumer()) {
		line("  consumers: %s", consumerSettings(bus.ConsumerDefaults))
	}
	if bus.Consumers != model.ConsumersPull {
		line("  consumers: %s", bus.Consumers)
	}
	if bus.Auth != model.AuthPassword {
		line("  auth: %s", bus.Auth)
	}
	if o := bus.Operator; o != nil {
		line("  operator @ %s", o.Pos)
		line("    store: %s name: %q account: %s", o.Store, o.Name, o.Account)
		line("    system_creds: %s signing_key: %s account_key: %s", o.SystemCreds, o.SigningKey, o.AccountKey)
	}
	switch r := bus.Reload; {
	case r.Manual:
		line("  reload: manual")
	case r.System:
		line("  reload: system")
	case r.PIDFile != "":
		line("  reload: pid_file %s", r.PIDFile)
	case len(r.Command) > 0:
		line("  reload: command %q", r.Command)
	}
	for _, s := range bus.Servers {
		if s.Name == "" {
			continue // bus.url's one server, printed above
		}
		line("  server %s @ %s", s.Name, s.Pos)
		line("    url: %s accounts_file: %s fingerprint: %s", s.URL, s.AccountsFile, s.Fingerprint)
		line("    reload: %+v copy: %q", s.Reload, s.Copy)
		if s.CAFile != "" {
			line("    ca_file: %s", s.CAFile)
		}
	}

	c := m.Controller
	line("controller @ %s", c.Pos)
	for _, f := range c.Follows {
		line("  follows: %s @ %s", f, f.Pos)
	}
	for _, s := range c.Sends {
		line("  sends: %s @ %s", s, s.Pos)
	}
	for _, k := range c.Calls {
		line("  calls: %s @ %s", k, k.Pos)
	}

	for _, n := range m.Nodes {
		line("node %s @ %s", n.Name, n.Pos)
	}
	for _, s := range m.Seats {
		line("seat %s @ %s", s.Name, s.Pos)
		line("  scope: %s", s.Scope)
		list("accepts", s.Accepts)
		list("emits", s.Emits)
		list("serves", s.Serves)
		list("formerly", s.Formerly)
		if s.Stream != bus.Streams.Seats {
			line("  stream: %s", streamSettings(s.Stream))
		}
		if !reflect.DeepEqual(s.Consumer, bus.ConsumerDefaults) {
			line("  consumer: %s", consumerSettings(s.Consumer))
		}
	}
	for _, mod := range m.Modules {
		line("module %s @ %s", mod.Name, mod.Pos)
		list("on", mod.On)
		list("claims", mod.Claims)
		list("emits", mod.Emits)
		list("serves", mod.Serves)
		for _, f := range mod.Follows {
			line("  follows: %s @ %s", f, f.Pos)
		}
		for _, s := range mod.Sends {
			line("  sends: %s @ %s", s, s.Pos)
		}
		for _, k := range mod.Calls {
			line("  calls: %s @ %s", k, k.Pos)
		}
		if !reflect.DeepEqual(mod.Consumer, bus.ConsumerDefaults) {
			line("  consumer: %s", consumerSettings(mod.Consumer))
		}
	}
	var inst []string
	for _, i := range m.Instances() {
		inst = append(inst, i.String())
	}
	if len(inst) > 0 {
		line("instances: %s", strings.Join(inst, ", "))
	}
	for _, h := range m.Holders {
		line("holder %s: %s/%s @ %s", h.Seat, h.Node, h.Module, h.Pos)
	}
	for _, h := range m.Holding {
		how := "first claim"
		if h.Explicit {
			how = "explicit"
		}
		line("holding %s: %s (%s)", h.Seat, h.Holder, how)
	}
	for _, o := range m.Observers {
		line("observer %s @ %s", o.Name, o.Pos)
	}
	return b.String()
}

func streamSettings(s model.StreamSettings) string {
	return fmt.Sprintf("max_bytes %s, max_age %s, max_msgs %s, max_msg_size %s, storage %s, replicas %d, discard %s",
		model.FormatSize(s.MaxBytes), model.FormatAge(s.MaxAge), model.FormatCount(s.MaxMsgs), model.FormatSize(s.MaxMsgSize),
		s.Storage, s.Replicas, s.Discard)
}

func consumerSettings(c model.ConsumerSettings) string {
	return fmt.Sprintf("ack_wait %s, max_ack_pending %d, max_deliver %d, backoff %v", c.AckWait, c.MaxAckPending, c.MaxDeliver, c.Backoff)
}
