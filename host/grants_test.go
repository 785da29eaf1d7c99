package host_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host/hosttest"
	"github.com/meshbus/meshctl/render"
)

// withheld is one grant taken from a principal: a publish or subscribe grant, or its
// allow_responses.
type withheld struct {
	publish        bool
	grant          render.Grant
	allowResponses bool
}

func (w withheld) String() string {
	switch {
	case w.allowResponses:
		return "allow_responses"
	case w.publish:
		return "publish " + w.grant.String()
	default:
		return "subscribe " + w.grant.String()
	}
}

// from is p with w taken away.
func (w withheld) from(p render.Principal) render.Principal {
	drop := func(gs []render.Grant) []render.Grant {
		return slices.DeleteFunc(slices.Clone(gs), func(g render.Grant) bool { return g == w.grant })
	}
	switch {
	case w.allowResponses:
		p.AllowResponses = false
	case w.publish:
		p.Publish = drop(p.Publish)
	default:
		p.Subscribe = drop(p.Subscribe)
	}
	return p
}

// refuses reports whether err is user's refusal of something w granted. allow_responses is the
// permission to answer a request at its reply subject, an inbox of the caller's.
func (w withheld) refuses(user string, err error) bool {
	var v *busclient.PermissionError
	if !errors.As(err, &v) || v.User != user {
		return false
	}
	switch {
	case w.allowResponses:
		return v.Op == busclient.OpPublish && strings.HasPrefix(v.Subject, "_INBOX.")
	case w.publish:
		return v.Op == busclient.OpPublish && subjectMatches(w.grant.Subject, v.Subject)
	default:
		return v.Op == busclient.OpSubscribe && subjectMatches(w.grant.Subject, v.Subject) &&
			(w.grant.Queue == "" || w.grant.Queue == v.Queue)
	}
}

func grantsOf(p render.Principal) []withheld {
	var out []withheld
	for _, g := range p.Publish {
		out = append(out, withheld{publish: true, grant: g})
	}
	for _, g := range p.Subscribe {
		out = append(out, withheld{grant: g})
	}
	if p.AllowResponses {
		out = append(out, withheld{allowResponses: true})
	}
	return out
}

// Every grant the derivation makes is needed: taken away alone, for every principal of the matrix
// mesh, and made live by a reload, it makes one of that principal's jobs fail with a refusal of
// exactly what it granted. A grant no job needs is one the derivation should not make. Each kind
// of consumer derives its own grants, so each is proved.
func TestEveryGrantIsNeeded(t *testing.T) { eachKind(t, everyGrantIsNeeded) }

func everyGrantIsNeeded(t *testing.T, kind string) {
	t.Parallel()
	b := hosttest.StartConsumers(t, matrixMesh, kind)
	all := jobs()
	defer b.Install(t, b.Desired.Principals)
	for i, p := range b.Desired.Principals {
		var mine []job
		for _, j := range all {
			if j.user == p.User {
				mine = append(mine, j)
			}
		}
		for _, w := range grantsOf(p) {
			t.Run(p.User+"/"+w.String(), func(t *testing.T) {
				// One reload per grant: each installs the whole mesh but this grant, which
				// also gives back the one taken before.
				less := slices.Clone(b.Desired.Principals)
				less[i] = w.from(p)
				b.Install(t, less)
				// Its shared connection, if a counterpart's job used it, lost subscriptions
				// the reload no longer allowed: dialled afresh when next needed.
				defer b.Forget(p.User)
				as := b.Dial(t, p.User)
				defer as.Close()
				var said []string
				for _, j := range mine {
					ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
					err := j.do(ctx, b, as)
					cancel()
					if w.refuses(p.User, err) {
						t.Logf("needed by %q: %v", j.name, err)
						return
					}
					if errors.Is(err, errHelper) {
						t.Fatalf("job %q: %v", j.name, err)
					}
					said = append(said, j.name+": "+errString(err))
				}
				t.Errorf("no job of %s needs %s (%s):\n  %s", p.User, w, w.grant.Job, strings.Join(said, "\n  "))
			})
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "done"
	}
	return err.Error()
}
