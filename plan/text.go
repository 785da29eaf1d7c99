package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/meshbus/meshctl/internal/printable"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// SchemaVersion names the JSON shape of a plan. It changes only when a field changes
// meaning or goes; fields may be added within a version.
const SchemaVersion = "meshctl.plan/v1"

// Document is a plan as JSON: the same value the text and Markdown show.
type Document struct {
	Schema   string       `json:"schema"`
	Baseline Baseline     `json:"baseline"`
	InSync   bool         `json:"in_sync"`
	Blocked  bool         `json:"blocked"`
	Summary  Summary      `json:"summary"`
	Changes  []Change     `json:"changes"`
	Holders  []HolderMove `json:"holders"`
	// Graces are the former holders that may still acknowledge the work they took (Plan.Graces).
	Graces []render.AckGrace `json:"graces,omitempty"`
	// MassDelete is present when the plan deletes more than half of what meshctl owns.
	MassDelete *MassDelete `json:"mass_delete,omitempty"`
	// Overcommit is present when the plan's streams may hold more than the bus has.
	Overcommit *Overcommit `json:"overcommit,omitempty"`
}

// Doc is the plan as its JSON document.
func (p *Plan) Doc() Document {
	d := Document{Schema: SchemaVersion, Baseline: p.Baseline, InSync: p.inSync(), Blocked: p.Blocked(), Summary: p.Summary(),
		Changes: p.Changes, Holders: p.Holders, Graces: p.Graces, MassDelete: p.MassDelete, Overcommit: p.Overcommit}
	if d.Baseline == "" {
		d.Baseline = BaselineBus
	}
	if d.Changes == nil {
		d.Changes = []Change{}
	}
	if d.Holders == nil {
		d.Holders = []HolderMove{}
	}
	return d
}

// JSON writes the plan as one indented JSON document.
func (p *Plan) JSON(w io.Writer) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p.Doc()); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// MarshalJSON writes a summary with lower-case keys.
func (s Summary) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]int{"create": s.Create, "update": s.Update, "replace": s.Replace,
		"delete": s.Delete, "conflict": s.Conflict, "refused": s.Refused})
}

// String is the one-line summary.
func (s Summary) String() string {
	out := fmt.Sprintf("%d to create, %d to update, %d to replace, %d to delete", s.Create, s.Update, s.Replace, s.Delete)
	if s.Conflict > 0 {
		out += fmt.Sprintf(", %d in conflict", s.Conflict)
	}
	if s.Refused > 0 {
		out += fmt.Sprintf(", %d refused", s.Refused)
	}
	return out
}

// palette colours the text on a terminal and does nothing elsewhere.
type palette struct{ on bool }

func (c palette) paint(code, s string) string {
	if !c.on {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}
func (c palette) add(s string) string  { return c.paint("32", s) }
func (c palette) del(s string) string  { return c.paint("31", s) }
func (c palette) mod(s string) string  { return c.paint("33", s) }
func (c palette) bold(s string) string { return c.paint("1", s) }

var marks = map[Action]string{Create: "+", Update: "~", Replace: "-/+", Delete: "-", Conflict: "!"}

// Text writes the plan for a person: each change with its reason and what it touches,
// every permission subject added or removed, and never a hash or a password.
func (p *Plan) Text(w io.Writer, color bool) error {
	c := palette{on: color}
	var b strings.Builder
	if p.inSync() {
		b.WriteString(p.inSyncSentence() + "\n")
		for _, g := range p.runningGraces() {
			b.WriteString(g + "\n")
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	for _, ch := range p.Changes {
		mark := marks[ch.Action]
		head := fmt.Sprintf("%s %s", mark, printable.Text(ch.ID()))
		switch ch.Action {
		case Create:
			head = c.add(head)
		case Delete, Replace, Conflict:
			head = c.del(head)
		default:
			head = c.mod(head)
		}
		fmt.Fprintf(&b, "%s\n    %s\n", head, printable.Text(ch.Reason))
		for _, f := range ch.Fields {
			imm := ""
			if f.Immutable {
				imm = " (cannot be updated in place)"
			}
			fmt.Fprintf(&b, "    %s: %s → %s%s\n", printable.Text(f.Field), printable.Text(f.Before), printable.Text(f.After), imm)
		}
		if ch.Risk != RiskNone && ch.Risk != "" {
			fmt.Fprintf(&b, "    risk: %s\n", ch.Risk)
		}
		if ch.AtStake.Any() {
			fmt.Fprintf(&b, "    at stake: %s\n", describeStake(ch.AtStake))
		} else if p.uncounted() && losesWhatItHolds(ch) {
			b.WriteString("    at stake: not counted (no bus was read)\n")
		}
		if ch.Refused != "" {
			fmt.Fprintf(&b, "    %s\n", c.bold(c.del("REFUSED: "+printable.Text(ch.Refused))))
		}
		for _, u := range ch.Users {
			writeUser(&b, c, u)
		}
	}
	for _, h := range p.Holders {
		fmt.Fprintf(&b, "%s seat %s: holder %s → %s (its work queue is kept%s)\n", c.mod("~"), printable.Text(h.Seat), instanceOrNone(h.From), instanceOrNone(h.To), p.startingGrace(h))
	}
	for _, g := range p.runningGraces() {
		b.WriteString(g + "\n")
	}
	fmt.Fprintf(&b, "\nPlan: %s.\n", p.Summary())
	if p.MassDeleteRefused() {
		fmt.Fprintf(&b, "%s\n", c.bold(c.del("REFUSED: "+printable.Text(p.MassDelete.Refused))))
	}
	if p.OvercommitRefused() {
		fmt.Fprintf(&b, "%s\n", c.bold(c.del("REFUSED: "+printable.Text(p.Overcommit.Refused))))
	}
	if n := len(p.Conflicts()); n > 0 {
		fmt.Fprintf(&b, "%d object(s) in conflict are left alone, with what depends on them; an apply performs the rest and exits 2.\n", n)
	}
	if p.uncounted() {
		b.WriteString(uncountedNote(p) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// inSync reports whether there is nothing to show: no change and no holder moving.
func (p *Plan) inSync() bool { return p.Empty() && len(p.Holders) == 0 }

func (p *Plan) inSyncSentence() string {
	if p.uncounted() {
		return "Both descriptions derive the same bus: nothing would change."
	}
	return "The bus is in sync with the mesh: nothing to change."
}

// uncounted reports whether the plan was computed without a bus, so nothing queued in
// what it replaces or deletes was counted.
func (p *Plan) uncounted() bool { return p.Baseline == BaselineDescription }

// losesWhatItHolds reports whether a change would lose what its object holds, were any
// of it queued: a stream's messages, a consumer's undelivered and unacknowledged work.
func losesWhatItHolds(c Change) bool {
	return (c.Action == Replace || c.Action == Delete) && (c.Kind == KindStream || c.Kind == KindConsumer)
}

// uncountedNote says what a plan against a description cannot know, so a reviewer does
// not read "nothing at stake" into a diff that never looked.
func uncountedNote(p *Plan) string {
	note := "Compared with an older description, not a bus."
	for _, c := range p.Changes {
		if losesWhatItHolds(c) {
			return note + " Messages queued in what is replaced or deleted cannot be counted without a bus:\n" +
				"`meshctl diff` against the live bus counts them, and `meshctl apply` refuses to lose them without --allow-data-loss."
		}
	}
	return note
}

func writeUser(b *strings.Builder, c palette, u UserChange) {
	var head string
	user := printable.Text(u.User)
	switch u.Action {
	case Create:
		head = c.add("+ user " + user)
	case Delete:
		head = c.del("- user " + user)
	default:
		head = c.mod("~ user " + user)
	}
	var notes []string
	if u.Credential != "" {
		notes = append(notes, "credential "+printable.Text(u.Credential))
	} else if u.Action == Create {
		notes = append(notes, "locked until a credential is issued")
	}
	if u.AllowResponses != "" {
		notes = append(notes, "allow_responses "+printable.Text(u.AllowResponses))
	}
	if len(notes) > 0 {
		head += " (" + strings.Join(notes, ", ") + ")"
	}
	fmt.Fprintf(b, "    %s\n", head)
	for _, s := range u.PublishAdded {
		fmt.Fprintf(b, "        %s\n", c.add("+ publish   "+printable.Text(s)))
	}
	for _, s := range u.PublishRemoved {
		fmt.Fprintf(b, "        %s\n", c.del("- publish   "+printable.Text(s)))
	}
	for _, s := range u.SubscribeAdded {
		fmt.Fprintf(b, "        %s\n", c.add("+ subscribe "+printable.Text(s)))
	}
	for _, s := range u.SubscribeRemoved {
		fmt.Fprintf(b, "        %s\n", c.del("- subscribe "+printable.Text(s)))
	}
}

func instanceOrNone(i *model.Instance) string {
	if i == nil {
		return "none"
	}
	return printable.Text(i.String())
}

// startingGrace is what a holder move's former holder may still do, as a clause of the move's
// line: acknowledge the work it took for one ack wait after the apply; "" when it may not.
func (p *Plan) startingGrace(h HolderMove) string {
	for _, g := range p.Graces {
		if h.From != nil && g.Seat == h.Seat && g.Holder == *h.From && g.Until.IsZero() {
			return fmt.Sprintf("; %s may acknowledge the work in its hands for %s after this apply, and nothing else of the seat",
				printable.Text(g.Holder.String()), g.For)
		}
	}
	return ""
}

// runningGraces says of each grace begun by an earlier apply until when its former holder may
// still acknowledge the work it took, and that the first reconcile after that ends it.
func (p *Plan) runningGraces() []string {
	var out []string
	for _, g := range p.Graces {
		if !g.Until.IsZero() {
			out = append(out, fmt.Sprintf("seat %s: its former holder %s may acknowledge the work it took until %s, and takes nothing new; the first reconcile after that takes the grant away",
				printable.Text(g.Seat), printable.Text(g.Holder.String()), g.Until.UTC().Format(time.RFC3339)))
		}
	}
	return out
}
