package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/model"
)

const secret = "HUNTER2SECRETPASSWORDXYZ27"

// What `meshctl credentials issue` prints is what ReadMembership reads.
func TestReadMembershipReadsWhatIssuePrints(t *testing.T) {
	t.Parallel()
	// cmd/meshctl/credentials.go marshals exactly this map.
	line, err := json.Marshal(map[string]string{
		"address": "nats://127.0.0.1:4222", "fingerprint": "ab", "user": "beta.postman", "password": secret,
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := host.ReadMembership(strings.NewReader(string(line) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := host.Membership{Address: "nats://127.0.0.1:4222", Fingerprint: "ab", User: "beta.postman", Password: secret}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
}

// A membership that is not one is refused with a reason, and the reason never quotes the
// password.
func TestReadMembershipRefusesWithoutTheSecret(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, input, says string }{
		{"empty", "", "empty"},
		{"not JSON", `{"password": ` + secret + `}`, "not JSON"},
		{"unknown field", `{"address": "nats://x:1", "user": "u", "pasword": "` + secret + `"}`, `"pasword"`},
		{"no password", `{"address": "nats://x:1", "user": "u"}`, "no password"},
		{"nothing", `{}`, "no address, no user, no password"},
		{"two", `{"address": "nats://x:1", "user": "u", "password": "` + secret + `"} {"address": "nats://x:1"}`, "more than one"},
		{"wrong type", `{"address": "nats://x:1", "user": "u", "password": 7}`, "password"},
		{"a CA that is none", `{"address": "nats://x:1", "user": "u", "password": "` + secret + `", "ca": "not PEM"}`, "no PEM certificate"},
		{"a certificate without its key", `{"address": "nats://x:1", "user": "u", "password": "` + secret + `", "cert_file": "/etc/mesh/tls.crt"}`, "both cert_file and key_file"},
		{"a key without its certificate", `{"address": "nats://x:1", "user": "u", "password": "` + secret + `", "key_file": "/etc/mesh/tls.key"}`, "both cert_file and key_file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := host.ReadMembership(strings.NewReader(c.input))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("%v does not say %q", err, c.says)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), secret[:1]+"'") {
				t.Errorf("the error quotes the password: %v", err)
			}
		})
	}
}

// A membership file is read as ReadMembership reads its content, and what is wrong with it
// names the file, never the password.
func TestReadMembershipFileNamesTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, bad, none := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json"), filepath.Join(dir, "none.json")
	for path, body := range map[string]string{
		good: `{"address": "nats://x:1", "user": "u", "password": "` + secret + `"}` + "\n",
		bad:  `{"address": "nats://x:1", "user": "u", "pasword": "` + secret + `"}`,
	} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m, err := host.ReadMembershipFile(good)
	if want := (host.Membership{Address: "nats://x:1", User: "u", Password: secret}); err != nil || !reflect.DeepEqual(m, want) {
		t.Errorf("%s: %#v, %v; want %#v", good, m, err, want)
	}
	_, err = host.ReadMembershipFile(bad)
	if err == nil || !strings.HasPrefix(err.Error(), bad+": reading the membership: ") || strings.Contains(err.Error(), secret) {
		t.Errorf("%s: %v; want the file named and the reason, without the password", bad, err)
	}
	if _, err = host.ReadMembershipFile(none); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), none) {
		t.Errorf("%s: %v; want fs.ErrNotExist naming the file", none, err)
	}
}

// A membership printed by mistake shows who and where, not the password.
func TestAMembershipDoesNotPrintItsPassword(t *testing.T) {
	t.Parallel()
	m := host.Membership{Address: "nats://127.0.0.1:4222", User: "beta.postman", Password: secret}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if got := fmt.Sprintf(verb, m); strings.Contains(got, secret) || !strings.Contains(got, "beta.postman") {
			t.Errorf("%s prints %s", verb, got)
		}
	}
}

func TestInstanceOf(t *testing.T) {
	t.Parallel()
	for user, want := range map[string]*model.Instance{
		"beta.postman": {Node: "beta", Module: "postman"},
		"node.one":     nil,
		"enrol.one":    nil,
		"controller":   nil,
		"a.b.c":        nil,
		".x":           nil,
	} {
		got, ok := host.InstanceOf(user)
		if ok != (want != nil) || (ok && got != *want) {
			t.Errorf("InstanceOf(%q) = %v, %v; want %v", user, got, ok, want)
		}
	}
}

// Join dials as the membership says: its own inbox prefix, an address without a scheme taken as
// nats://, and errors that name the address and never the password.
func TestJoin(t *testing.T) {
	t.Parallel()
	b := hosttest.Start(t, matrixMesh)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	m := b.Membership("two.audit")
	m.Address = strings.TrimPrefix(m.Address, "nats://")
	h, err := host.Join(ctx, m)
	if err != nil {
		t.Fatalf("joining at %s: %v", m.Address, err)
	}
	defer h.Close()
	if got := h.Conn().NewInbox(); !strings.HasPrefix(got, "_INBOX.two.audit.") {
		t.Errorf("inbox %s is not under the user's own prefix", got)
	}
	if h.User() != "two.audit" || h.Address() != b.Cluster.Servers[0].URL {
		t.Errorf("joined as %s at %s", h.User(), h.Address())
	}

	m.Password = secret
	_, err = host.Join(ctx, m)
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("a wrong password: got %v, want an authorization error", err)
	}
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), b.Cluster.Servers[0].URL) {
		t.Errorf("the error should name %s and not the password: %v", b.Cluster.Servers[0].URL, err)
	}

	m = b.Membership("two.audit")
	m.Address = "nats://two.audit:" + secret + "@" + strings.TrimPrefix(b.Cluster.Servers[0].URL, "nats://")
	if _, err := host.Join(ctx, m); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("a password inside the address: got %v, want it refused without quoting it", err)
	}
}

// A host that leaves drains: what its handlers published is flushed, and the connection closes.
func TestDrainCloses(t *testing.T) {
	t.Parallel()
	b := hosttest.Start(t, matrixMesh)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := host.Join(ctx, b.Membership("two.shop"), nats.ClosedHandler(func(*nats.Conn) {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if !h.Conn().IsClosed() {
		t.Fatal("the connection is open after Drain")
	}
	// The connection's own closed handler ran too: the refusals channel is closed.
	if _, open := <-h.Conn().Violations(); open {
		t.Fatal("the violations channel is open after Drain")
	}
	var v *busclient.PermissionError
	if errors.As(h.Check(ctx, func(context.Context) error { return nil }), &v) {
		t.Fatal("a closed host reported a refusal")
	}
}
