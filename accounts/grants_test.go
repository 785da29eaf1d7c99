package accounts

import (
	"slices"
	"testing"

	"github.com/meshbus/meshctl/render"
)

// A principal's grants reach its user JWT as the accounts file writes them: a queue after its
// subject, and nothing a user JWT would read as two subjects or none.
func TestGrantsOfKeepsQueuesAndRefusesWhatIsNoSubject(t *testing.T) {
	p := render.Principal{User: "m", AllowResponses: true,
		Publish:   []render.Grant{{Subject: "a.b"}},
		Subscribe: []render.Grant{{Subject: "c.>", Queue: "q"}, {Subject: "_INBOX_m.>"}}}
	g := GrantsOf(p)
	if !slices.Equal(g.Publish, []string{"a.b"}) || !slices.Equal(g.Subscribe, []string{"c.> q", "_INBOX_m.>"}) || !g.AllowResponses {
		t.Fatalf("GrantsOf = %+v", g)
	}
	if err := g.check(); err != nil {
		t.Fatalf("check refused %+v: %v", g, err)
	}
	for _, bad := range []Grants{{Publish: []string{"a b"}}, {Subscribe: []string{"a b c"}}, {Subscribe: []string{" a"}},
		{Subscribe: []string{"a "}}, {Publish: []string{""}}, {Subscribe: []string{"a\nb"}}} {
		if bad.check() == nil {
			t.Errorf("check took %+v", bad)
		}
	}
}
