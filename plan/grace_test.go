package plan

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// During a seat's former holder's grace a bus that holds it plans nothing, and says until when
// the grace runs; once the grace is over the plan takes the acknowledgements away, and only them.
func TestAGraceIsPlannedNothingUntilItEnds(t *testing.T) {
	t.Parallel()
	m := description(t, "testdata/diff/seat-handover/new")
	postman := model.Instance{Node: "beta", Module: "postman"}
	until := time.Date(2026, 1, 2, 3, 4, 35, 0, time.UTC)
	during := TargetOf(render.DeriveWithGraces(m, []render.AckGrace{{Seat: "mailer", Holder: postman, Until: until}}), nil)
	live := LiveOf(during)
	live.Baseline = BaselineBus

	p := Compute(during, live, Options{})
	if !p.Empty() || len(p.Holders) > 0 {
		t.Fatalf("during the grace the plan changes %+v, moves %+v", p.Changes, p.Holders)
	}
	var text, md bytes.Buffer
	if err := p.Text(&text, false); err != nil {
		t.Fatal(err)
	}
	if err := p.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{"text": text.String(), "markdown": md.String()} {
		if !strings.Contains(out, "in sync") || !strings.Contains(out, "beta/postman may acknowledge the work it took until 2026-01-02T03:04:35Z") {
			t.Errorf("the %s does not say the bus is in sync and until when the grace runs:\n%s", what, out)
		}
	}
	if doc := p.Doc(); !doc.InSync || len(doc.Graces) != 1 || !doc.Graces[0].Until.Equal(until) {
		t.Errorf("the document: in sync %v, graces %+v", doc.InSync, doc.Graces)
	}

	p = Compute(TargetOf(render.Derive(m), nil), live, Options{})
	want := []UserChange{{User: "beta.postman", Action: Update, PublishRemoved: []string{"$JS.ACK.SEAT_MAILER.SEAT_MAILER_worker.>"}}}
	if len(p.Changes) != 1 || p.Changes[0].Kind != KindAccounts || len(p.Holders) > 0 || len(p.Graces) > 0 {
		t.Fatalf("after the grace: changes %+v, holders %+v, graces %+v", p.Changes, p.Holders, p.Graces)
	}
	if diff := cmp.Diff(want, p.Changes[0].Users); diff != "" {
		t.Errorf("after the grace (-want +got):\n%s", diff)
	}
}
