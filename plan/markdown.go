package plan

import (
	"fmt"
	"io"
	"strings"

	"github.com/meshbus/meshctl/graph"
	"github.com/meshbus/meshctl/internal/printable"
	"github.com/meshbus/meshctl/model"
)

// foldAfter is how many rows a section shows before it folds them into a <details> block:
// a pull-request comment that scrolls for pages is one nobody reads to the end, while the
// heading above each block still says how many rows it holds.
const foldAfter = 10

// Markdown writes the plan as a compact summary for a pull-request comment: a heading with
// the counts; the risky changes first (data loss, then disruption) with their reasons; the
// picture of who talks to whom that the change alters, when the plan carries one; a table
// of the objects; each user's permission subjects added and removed; the seats whose
// holder moves. Long sections fold into <details> blocks. Like the text, it never shows a
// hash or a password: the plan carries neither.
func (p *Plan) Markdown(w io.Writer) error {
	var b strings.Builder
	if p.inSync() {
		b.WriteString("**meshctl diff:** " + mdText(p.inSyncSentence()) + "\n")
		for _, g := range p.runningGraces() {
			b.WriteString("\n" + mdText(g) + "\n")
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "### meshctl diff: %s\n\n", mdText(p.Summary().String()))
	if p.uncounted() {
		b.WriteString("Compared with an older description (`--from`), not with a bus.\n\n")
	}
	if p.Blocked() {
		var why []string
		if s := p.Summary(); s.Refused > 0 {
			why = append(why, fmt.Sprintf("%d refused", s.Refused))
		}
		if p.MassDeleteRefused() {
			why = append(why, mdText(p.MassDelete.Refused))
		}
		if p.OvercommitRefused() {
			why = append(why, mdText(p.Overcommit.Refused))
		}
		fmt.Fprintf(&b, "**Blocked:** an apply would refuse this plan (%s) and change nothing.\n\n", strings.Join(why, "; "))
	}
	if n := len(p.Conflicts()); n > 0 {
		fmt.Fprintf(&b, "**In conflict:** %d object(s) meshctl does not own are in the way; an apply leaves them, and what depends on them, alone, performs the rest and fails.\n\n", n)
	}
	p.markdownRisks(&b)
	p.markdownPicture(&b)
	p.markdownObjects(&b)
	p.markdownUsers(&b)
	p.markdownHolders(&b)
	for _, g := range p.runningGraces() {
		b.WriteString(mdText(g) + "\n\n")
	}
	_, err := io.WriteString(w, strings.TrimRight(b.String(), "\n")+"\n")
	return err
}

// markdownRisks lists the changes that lose data or disrupt someone, data loss first, so a
// reviewer reads them before the routine ones.
func (p *Plan) markdownRisks(b *strings.Builder) {
	var items []string
	uncountedLoss := false
	for _, risk := range []Risk{RiskDataLoss, RiskDisruptive} {
		for _, c := range p.Changes {
			if c.Risk != risk {
				continue
			}
			item := fmt.Sprintf("- **%s**: %s %s: %s", risk, c.Action, mdCode(c.ID(), false), riskReason(c))
			switch {
			case c.AtStake.Any():
				item += ". At stake: " + mdText(describeStake(c.AtStake))
			case p.uncounted() && losesWhatItHolds(c):
				item += ". Queued messages not counted"
				uncountedLoss = true
			}
			if c.Refused != "" {
				item += ". **Refused:** " + mdText(c.Refused)
			}
			items = append(items, item)
		}
	}
	if len(items) == 0 {
		return
	}
	b.WriteString("#### Risky changes\n\n")
	if uncountedLoss {
		b.WriteString("Messages queued in what is replaced or deleted cannot be counted without a bus: " +
			"`meshctl diff` against the live bus counts them, and `meshctl apply` refuses to lose them without `--allow-data-loss`.\n\n")
	}
	writeFolded(b, fmt.Sprintf("%d risky changes", len(items)), strings.Join(items, "\n"), len(items))
}

// riskReason is why a change is risky, in a sentence. For the accounts config the generic
// reason says nothing a reviewer can check, so it names who loses what at the reload.
func riskReason(c Change) string {
	if c.Kind != KindAccounts {
		return mdText(c.Reason)
	}
	var losses []string
	for _, u := range c.Users {
		user := mdCode(u.User, false)
		if u.Action == Delete {
			losses = append(losses, user+" is removed")
			continue
		}
		var what []string
		if n := len(u.PublishRemoved) + len(u.SubscribeRemoved); n > 0 {
			what = append(what, plural(uint64(n), "permission subject"))
		}
		if u.AllowResponses == "revoked" {
			what = append(what, "allow\\_responses")
		}
		if len(what) > 0 {
			losses = append(losses, user+" loses "+strings.Join(what, " and "))
		}
		if u.Credential == "revoked" || u.Credential == "rotated" {
			losses = append(losses, user+"'s credential is "+u.Credential)
		}
	}
	if len(losses) == 0 {
		return mdText(c.Reason)
	}
	return "at the reload, " + strings.Join(losses, "; ")
}

// maxDrawnEdges bounds the picture of a change. Past it a flowchart is a tangle nobody reads
// in a comment, and GitHub's renderer gives up on large ones; the permissions still list
// every subject.
const maxDrawnEdges = 40

// Draw sets the plan's Picture from the descriptions it was planned between: who talks to
// whom, module by module, as far as the change alters it, and the modules, seats or
// controller at the ends of what it alters.
func (p *Plan) Draw(before, after *model.Mesh) {
	p.Picture = graph.Diff(graph.Of(before, graph.Options{}), graph.Of(after, graph.Options{})).Changed()
}

// markdownPicture draws the plan's Picture as a Mermaid flowchart, which GitHub renders in
// the comment: a reviewer sees that a new module now hears the shop's orders as one green
// arrow, where the permissions below say it subject by subject. Nothing is drawn when the
// change connects and disconnects no one.
func (p *Plan) markdownPicture(b *strings.Builder) {
	if p.Picture == nil || p.Picture.Empty() {
		return
	}
	b.WriteString("#### Who talks to whom\n\n")
	if n := len(p.Picture.Edges); n > maxDrawnEdges {
		fmt.Fprintf(b, "The change adds or removes %d arrows, too many to draw here: `meshctl graph` draws the whole mesh, and the permissions below list every subject.\n\n", n)
		return
	}
	b.WriteString("What the change connects (green, thick arrows) and disconnects (red, dashed), with the modules, seats and controller at either end; `meshctl graph` draws the whole mesh.\n\n")
	b.WriteString("```mermaid\n")
	_ = p.Picture.Mermaid(b) // a strings.Builder does not fail
	b.WriteString("```\n\n")
}

// markdownObjects is the table of every change: action, object, reason and the fields it
// touches.
func (p *Plan) markdownObjects(b *strings.Builder) {
	if len(p.Changes) == 0 {
		return
	}
	var t strings.Builder
	t.WriteString("| Action | Object | Reason |\n|---|---|---|\n")
	for _, c := range p.Changes {
		reason := mdText(c.Reason)
		for _, f := range c.Fields {
			reason += "<br>" + mdText(f.Field) + ": " + mdValue(f.Before) + " → " + mdValue(f.After)
			if f.Immutable {
				reason += " (cannot be updated in place)"
			}
		}
		if c.Kind == KindAccounts && len(c.Users) > 0 {
			reason += "<br>" + plural(uint64(len(c.Users)), "user") + " changed: see Permissions"
		}
		fmt.Fprintf(&t, "| %s | %s | %s |\n", c.Action, mdCode(c.ID(), true), reason)
	}
	b.WriteString("#### Objects\n\n")
	writeFolded(b, plural(uint64(len(p.Changes)), "object"), strings.TrimRight(t.String(), "\n"), len(p.Changes))
}

// markdownUsers lists each user's permission changes, subject by subject.
func (p *Plan) markdownUsers(b *strings.Builder) {
	var items []string
	for _, c := range p.Changes {
		for _, u := range c.Users {
			items = append(items, markdownUser(u))
		}
	}
	if len(items) == 0 {
		return
	}
	b.WriteString("#### Permissions\n\n")
	writeFolded(b, plural(uint64(len(items)), "user"), strings.Join(items, "\n"), len(items))
}

func markdownUser(u UserChange) string {
	var notes []string
	switch u.Action {
	case Create:
		notes = append(notes, "new user")
		if u.Credential == "" {
			notes = append(notes, "locked until a credential is issued")
		}
	case Delete:
		notes = append(notes, "user removed")
	}
	if u.AllowResponses != "" {
		notes = append(notes, "allow\\_responses "+u.AllowResponses)
	}
	if u.Credential != "" {
		notes = append(notes, "credential "+u.Credential)
	}
	line := "- " + mdCode(u.User, false)
	if len(notes) > 0 {
		line += ": " + strings.Join(notes, ", ")
	}
	for _, l := range []struct {
		what     string
		subjects []string
	}{
		{"publish added", u.PublishAdded},
		{"publish removed", u.PublishRemoved},
		{"subscribe added", u.SubscribeAdded},
		{"subscribe removed", u.SubscribeRemoved},
	} {
		if len(l.subjects) == 0 {
			continue
		}
		spans := make([]string, len(l.subjects))
		for i, s := range l.subjects {
			spans[i] = mdGrant(s)
		}
		line += "\n  - " + l.what + ": " + strings.Join(spans, ", ")
	}
	return line
}

// mdGrant shows a grant as the accounts config writes it (`"<subject> <queue>"` for a
// subscription limited to a queue group) in words a reviewer reads at a glance.
func mdGrant(g string) string {
	if subject, queue, ok := strings.Cut(g, " "); ok {
		return mdCode(subject, false) + " in queue group " + mdCode(queue, false)
	}
	return mdCode(g, false)
}

// markdownHolders is the table of seats whose holder moves.
func (p *Plan) markdownHolders(b *strings.Builder) {
	if len(p.Holders) == 0 {
		return
	}
	var t strings.Builder
	t.WriteString("| Seat | Holder before | Holder after |\n|---|---|---|\n")
	acks := false
	for _, h := range p.Holders {
		fmt.Fprintf(&t, "| %s | %s | %s |\n", mdCode(h.Seat, true), mdInstance(h.From), mdInstance(h.To))
		acks = acks || p.startingGrace(h) != ""
	}
	b.WriteString("#### Seat holders\n\n")
	b.WriteString("A seat's work queue stays when its holder changes: queued work waits for the new holder.")
	if acks {
		b.WriteString(" The holder before may acknowledge the work in its hands for its worker's ack wait after the apply (with pull consumers, plus the 30 s in which a pull request it sent before may still be answered), and nothing else of the seat: the new holder does none of that work again.")
	}
	b.WriteString("\n\n")
	writeFolded(b, plural(uint64(len(p.Holders)), "seat"), strings.TrimRight(t.String(), "\n"), len(p.Holders))
}

func mdInstance(i *model.Instance) string {
	if i == nil {
		return "none"
	}
	return mdCode(i.String(), true)
}

// writeFolded writes a section's body, inside a <details> block when it is long. GitHub
// renders Markdown inside the block only with a blank line after <summary> and before
// </details>.
func writeFolded(b *strings.Builder, summary, body string, rows int) {
	if rows > foldAfter {
		fmt.Fprintf(b, "<details><summary>%s</summary>\n\n%s\n\n</details>\n\n", mdText(summary), body)
		return
	}
	b.WriteString(body + "\n\n")
}

// mdValue shows a field's value in a table cell: as code, or "(none)" when empty, since an
// empty code span does not exist in Markdown.
func mdValue(s string) string {
	if s == "" {
		return "*(none)*"
	}
	return mdCode(s, true)
}

// mdText escapes prose for Markdown: every character that could open emphasis, a link, a
// code span, HTML, an entity or a table cell is backslash-escaped, and a line break becomes
// a space, since every reason sits on one line of a list or a table.
func mdText(s string) string {
	var b strings.Builder
	for _, r := range oneLine(s) {
		if strings.ContainsRune("\\`*_[]<>|~&#!", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// mdCode is s as a code span. Its fence is one backtick longer than the longest run of
// backticks in s, so none of them closes it; a space pads content that begins or ends
// with a backtick. Inside a table cell every pipe is escaped too: GitHub splits a row on
// a bare pipe even inside a code span, and removes the backslash before rendering it.
func mdCode(s string, inTable bool) string {
	s = oneLine(s)
	if s == "" {
		return "*(empty)*"
	}
	longest, run := 0, 0
	for _, r := range s {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	pad := ""
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") || (strings.HasPrefix(s, " ") && strings.HasSuffix(s, " ") && strings.TrimSpace(s) != "") {
		pad = " "
	}
	out := fence + pad + s + pad + fence
	if inTable {
		out = strings.ReplaceAll(out, "|", `\|`)
	}
	return out
}

// oneLine puts s on one line, a line break would end a list item or a table row, and escapes
// what else is not printable: the Markdown is also read on a terminal (diff -o markdown).
func oneLine(s string) string {
	return printable.Text(strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s))
}
