package accounts

import (
	"strings"
	"testing"

	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/state"
)

// TestChangeNamesTheHostsBusAuthJWTSupersedes holds the account JWT's change of a mesh whose
// bus.auth became jwt while the store holds credentials of the accounts config: each host
// without a user JWT yet is marked for a new membership and the change refused unless
// allowed; a host already issued its user JWT is not, though its old credential is dropped.
func TestChangeNamesTheHostsBusAuthJWTSupersedes(t *testing.T) {
	t.Parallel()
	p := JWTPlan{Superseded: []string{"alpha.shop", "node.beta"}}
	c, ok := p.Change(nil, plan.Options{})
	if !ok || c.Refused == "" || len(c.Users) != 2 || c.Users[0].Credential != plan.CredentialReissue ||
		!strings.HasPrefix(c.Reason, "bus.auth changes to jwt: ") {
		t.Fatalf("two hosts superseded, none issued: %+v", c)
	}
	if c, _ := p.Change(nil, plan.Options{AllowReissue: true}); c.Refused != "" {
		t.Errorf("allowed, still refused: %+v", c)
	}
	c, _ = p.Change(map[string]state.JWTUser{"alpha.shop": {}, "node.beta": {}}, plan.Options{})
	if c.Refused != "" || len(c.Users) != 0 || c.Reason != "dropping 2 credential(s) of the accounts config that bus.auth: jwt supersedes" {
		t.Errorf("every host issued its user JWT: %+v", c)
	}
	if _, ok := (JWTPlan{}).Change(nil, plan.Options{}); ok {
		t.Error("a plan with nothing to do has a change")
	}
}
