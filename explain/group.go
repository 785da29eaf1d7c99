package explain

import (
	"strings"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/render"
)

// Group is what refusals counted together share: the principal, the operation, the rule the
// subject falls under and the queue group. watch logs a group once an interval and records it
// as one row for `meshctl status`; explain prints one line per group of a server's log.
type Group struct {
	User, Op, Rule, Queue string
}

// GroupOf is the group r counts in.
func GroupOf(r busclient.PermissionError) Group {
	return Group{User: r.User, Op: r.Op, Rule: Rule(r), Queue: r.Queue}
}

// Rule is the subject r falls under, with what changes from one connection or one message to
// the next generalised, so that one mistake is one kind of refusal however often it recurs:
//   - an inbox that is not the principal's own is `_INBOX.>`: a client whose inbox prefix is
//     not set makes a random one per connection (`_INBOX.<random>.*`), and one set to another
//     principal's is the same mistake;
//   - under its own inbox, `_INBOX.<user>.>`;
//   - an acknowledgement is `$JS.ACK.<stream>.<consumer>.>`: the rest counts messages.
//
// Any other subject is its own rule: the mesh's subjects are named by the description, not
// made up per connection. Refusal explains every subject of one rule alike.
func Rule(r busclient.PermissionError) string {
	tok := strings.Split(r.Subject, ".")
	own := render.Inbox(r.User)
	switch {
	case tok[0] == "_INBOX" && (r.Subject == own || strings.HasPrefix(r.Subject, own+".")):
		return own + ".>"
	case tok[0] == "_INBOX":
		return "_INBOX.>"
	case len(tok) > 4 && tok[0] == "$JS" && tok[1] == "ACK":
		return strings.Join(tok[:4], ".") + ".>"
	}
	return r.Subject
}
