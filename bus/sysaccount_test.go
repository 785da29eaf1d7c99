package bus

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// jsAPIExport is the system account's export every account's JetStream API requests go through.
const jsAPIExport = "$JS.API.>"

// A JetStream request arms the response threshold timer of the system account's $JS.API.>
// export, and the timer, when it fires, reads which account the export belongs to without a
// lock. A reload of the embedded bus must not write that while the timer may be running: only
// a config with a block for the system account rebuilds the account's exports, so the export
// the timer holds is left alone (docs/nats-behaviour.md, "Reload"). Each round lowers the
// threshold, makes a JetStream request, reloads and waits for the timer to fire. That the
// reload rebuilt the export shows in its threshold, back at the server's default; under -race
// the timer firing after a reload that wrote the export is, besides, a data race.
//
// The timer is seen to fire through a request nothing answers ($JS.API.ACCOUNT.… is left to
// the system account): its pending response stays until the timer expires it. That wait spins
// rather than sleeps: the race detector orders a timer's function after every timer run
// before it on the same processor, so a timer the waiter set after the reload would hide the
// race.
func TestAReloadLeavesTheJetStreamResponseTimerAlone(t *testing.T) {
	t.Parallel()
	u := testUser{name: "one.a", password: "pw-a", pub: []string{"$JS.API.>"}, sub: []string{"_INBOX.>"}}
	e := startTestBus(t, accountsFor(t, u))
	sys := e.Server().SystemAccount()
	if sys == nil {
		t.Fatal("the embedded bus has no system account")
	}
	nc := dialAs(t, e.URL(), u)

	// Long enough for the reload to be done before the timer the request armed fires.
	const threshold = time.Second
	for round := range 3 {
		if err := sys.SetServiceExportResponseThreshold(jsAPIExport, threshold); err != nil {
			t.Fatalf("round %d: lowering the response threshold of %s: %v", round, jsAPIExport, err)
		}
		if _, err := nc.Request("$JS.API.INFO", nil, 30*time.Second); err != nil {
			t.Fatalf("round %d: a JetStream request: %v", round, err)
		}
		if err := nc.PublishRequest("$JS.API.ACCOUNT.UNANSWERED", nc.NewRespInbox(), nil); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		other := testUser{name: fmt.Sprintf("one.b%d", round), password: "pw-b", pub: []string{"mesh.b"}, sub: []string{"_INBOX.one.b.>"}}
		writeAccounts(t, e.AccountsFile(), accountsFor(t, u, other))
		if err := e.Reload(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got, err := sys.ServiceExportResponseThreshold(jsAPIExport); err != nil || got == threshold {
			t.Fatalf("round %d: after the reload %s is the export the timer holds (threshold %v, %v): the reload rewrote it",
				round, jsAPIExport, got, err)
		}
		// The threshold's timer has fired once it has expired the unanswered request.
		deadline := time.Now().Add(time.Minute)
		for sys.NumPendingAllResponses() > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the unanswered request was not expired within a minute", round)
			}
			runtime.Gosched()
		}
	}
}
