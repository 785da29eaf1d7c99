package reconcile

import (
	"testing"

	"github.com/meshbus/meshctl/model"
)

// A kept session serves a description only on the same operator: switching bus.auth to jwt,
// or pointing bus.operator at another store, connects anew, while the same block written
// elsewhere does not.
func TestSameBusComparesTheOperator(t *testing.T) {
	t.Parallel()
	op := &model.Operator{Store: "/srv/nsc", Account: "MESH", SystemCreds: "/srv/sys.creds", Pos: model.Pos{File: "a.yaml", Line: 3}}
	moved := *op
	moved.Pos = model.Pos{File: "b.yaml", Line: 9}
	other := *op
	other.Store = "/srv/other"
	jwtBus := model.Bus{URL: "nats://n1:4222", Auth: model.AuthJWT, Operator: op}
	for _, tc := range []struct {
		name string
		b    model.Bus
		same bool
	}{
		{"the same", model.Bus{URL: "nats://n1:4222", Auth: model.AuthJWT, Operator: &moved}, true},
		{"another store", model.Bus{URL: "nats://n1:4222", Auth: model.AuthJWT, Operator: &other}, false},
		{"nkey on the same servers", model.Bus{URL: "nats://n1:4222", Auth: model.AuthNkey}, false},
	} {
		if got := sameBus(jwtBus, tc.b); got != tc.same {
			t.Errorf("%s: sameBus %v; want %v", tc.name, got, tc.same)
		}
	}
}
