package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestMain lets the test binary be the connected rows' load process too: the rows start
// their own executable with -load, as the bench does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "-load=") {
		if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The connected rows in operator mode run end to end at a tiny size, so that they cannot rot:
// a three-server cluster whose operator the nats CLI made, the mesh applied into its account,
// every host connected with the credential minted for it, and each row run with the hosts
// connected and with none. The one change disconnects exactly the host whose permissions it
// changes, which logs in again with its reissued JWT, and nothing else disconnects anyone.
func TestTheJWTConnectedRowsRunAtATinySize(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	var log bytes.Buffer
	meshctl, err := buildMeshctl(t.Context(), tmp, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var results []*connectedResult
	const runs = 2
	if err := measureConnected(t.Context(), []int{25}, []string{"jwt"}, runs, meshctl, tmp, &log, &results); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(results) != 1 {
		t.Fatalf("%d results; want one", len(results))
	}
	c := results[0]
	if c.auth != "jwt" || c.servers != 3 || c.hosts == 0 {
		t.Errorf("auth %q, %d servers, %d hosts; want jwt on 3 servers, with hosts", c.auth, c.servers, c.hosts)
	}
	for _, id := range []string{"apply", "one-change", "issue"} {
		for _, phase := range []string{"hosts", "none"} {
			if got := len(c.rows[id+"/"+phase].times); got != runs {
				t.Errorf("%s/%s timed %d times; want %d", id, phase, got, runs)
			}
			if got := len(c.cpu[id+"/"+phase].times); got != runs {
				t.Errorf("the servers' CPU of %s/%s read %d times; want %d", id, phase, got, runs)
			}
		}
	}
	if len(c.reissued) != 1 {
		t.Errorf("the one change alters %v; want one principal", c.reissued)
	}
	if c.changes != runs || c.cut != runs || c.disconnects != 0 {
		t.Errorf("%d of %d changes with the hosts connected cut exactly %v, and %d other disconnects; want all %d, and none\n%s",
			c.cut, c.changes, c.reissued, c.disconnects, runs, log.String())
	}

	t.Logf("the rows' log:\n%s", log.String())
	var b bytes.Buffer
	(&report{plan: runPlan{runs: runs}, connected: results}).writeConnected(&printer{w: &b})
	out := b.String()
	for _, want := range []string{"### `bus.auth: jwt`, 25 module instances", "one push, proven",
		fmt.Sprintf("| only the host whose permissions changed disconnected: jwt, %d hosts | %d of %d changes cut exactly it; 0 other disconnects | yes |", c.hosts, runs, runs)} {
		if !strings.Contains(out, want) {
			t.Errorf("the connected section lacks %q:\n%s", want, out)
		}
	}
}
