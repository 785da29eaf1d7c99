package host

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/testnats"
	"github.com/meshbus/meshctl/wire"
)

// A cluster's membership lists every server and reads back as a target reaching each; one
// of a single server carries no servers key, as memberships did before clusters.
func TestAMembershipListsEveryServerOfACluster(t *testing.T) {
	cluster := busclient.Cluster([]busclient.Target{{URL: "nats://10.0.0.1:4222"}, {URL: "nats://10.0.0.2:4222"}, {URL: "nats://10.0.0.3:4222"}})
	line, err := json.Marshal(wire.NewMembership(cluster.ServerURLs(), cluster.Fingerprint, "alpha.shop", "pw", false))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadMembership(strings.NewReader(string(line)))
	if err != nil {
		t.Fatal(err)
	}
	if got := targetOf(m); got.URL != "nats://10.0.0.1:4222" || got.Others != "nats://10.0.0.2:4222,nats://10.0.0.3:4222" {
		t.Fatalf("the membership %s reads back as %+v", line, got)
	}
	single, _ := json.Marshal(wire.NewMembership([]string{"nats://10.0.0.1:4222"}, "", "alpha.shop", "pw", false))
	if strings.Contains(string(single), "servers") {
		t.Fatalf("a single server's membership changed shape: %s", single)
	}
	// An older reader's address-only line, and servers written without a scheme, still work.
	old, err := ReadMembership(strings.NewReader(`{"address":"10.0.0.1:4222","fingerprint":"","user":"u","password":"p","servers":["10.0.0.1:4222","10.0.0.2:4222"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := targetOf(old); got.URL != "nats://10.0.0.1:4222" || got.Others != "nats://10.0.0.2:4222" {
		t.Fatalf("read back as %+v", got)
	}
}

// A pinned membership is the line it always was: the fields that recognise a bus by its CA
// and present a client certificate are left out where they are empty, so a host reading
// memberships before them reads it unchanged. One with them reads back as a target carrying
// them, and its CA and client certificate reach the cluster's every server.
func TestAMembershipCarriesTheCAAndTheClientCertificateOnlyWhenItHasThem(t *testing.T) {
	pinned := busclient.Target{URL: "tls://10.0.0.1:4222", Fingerprint: strings.Repeat("ab", 32)}
	line, err := json.Marshal(MembershipOf(pinned, "alpha.shop", "pw", false))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"address":"tls://10.0.0.1:4222","fingerprint":"` + strings.Repeat("ab", 32) + `","user":"alpha.shop","password":"pw"}`; string(line) != want {
		t.Fatalf("a pinned membership changed:\n got %s\nwant %s", line, want)
	}

	ca := testnats.NewCA(t, t.TempDir())
	cluster := busclient.Cluster([]busclient.Target{
		{URL: "tls://10.0.0.1:4222", CA: ca.PEM, CertFile: "/etc/mesh/tls.crt", KeyFile: "/etc/mesh/tls.key"},
		{URL: "tls://10.0.0.2:4222", CA: ca.PEM, CertFile: "/etc/mesh/tls.crt", KeyFile: "/etc/mesh/tls.key"},
	})
	line, err = json.Marshal(MembershipOf(cluster, "alpha.shop", "pw", false))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadMembership(strings.NewReader(string(line)))
	if err != nil {
		t.Fatal(err)
	}
	got := targetOf(m)
	if got.CA != ca.PEM || got.CertFile != "/etc/mesh/tls.crt" || got.KeyFile != "/etc/mesh/tls.key" || got.Fingerprint != "" {
		t.Fatalf("the membership %s reads back as %+v", line, got)
	}
}
