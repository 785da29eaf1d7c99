package reconcile

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/meshbus/meshctl/render"
)

// A change that keeps the controller's entry is verified on the session's own connection,
// which the reload checked and kept: no new controller login, and no bcrypt of the server's
// for it. A change of the controller's entry is verified by a new login.
func TestAChangeKeepingTheControllerDoesNotLogItInAgain(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	logins := func() int {
		t.Helper()
		cz, err := s.Embedded.Server().Connz(&server.ConnzOptions{State: server.ConnClosed, Username: true, Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range cz.Conns {
			if c.AuthorizedUser == render.ControllerUser {
				n++
			}
		}
		return n
	}
	before := logins()
	f.mint(ctx, "alpha.shop")
	res := f.mustApply(ctx, s)
	if res.Applied == 0 {
		t.Fatal("issuing a credential changed nothing")
	}
	if after := logins(); after != before {
		t.Fatalf("a change keeping the controller's entry logged the controller in again (%d closed logins, %d before)", after, before)
	}

	// The controller's entry changed (its permissions follow one more event): a new login
	// proves it.
	f.write(strings.Replace(quickMesh, "  follows: [seat:mailer/sent]", "  follows: [seat:mailer/sent, shop/order.placed]", 1))
	f.mustApply(ctx, s)
	if after := logins(); after <= before {
		t.Fatal("a change of the controller's entry was not verified by a new login")
	}
}
