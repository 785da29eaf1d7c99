package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/controller"
	"github.com/meshbus/meshctl/internal/printable"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/state"
)

func init() {
	register("status", command{summary: "show what was last applied, who holds each seat, and the apply history", run: runStatus})
}

const statusHelp = `
Usage: meshctl status [-f DIR] [--state DIR] [-n N] [-o text|json]

Reads the state store and shows, without touching the bus: the store's identity (the
manager every accounts file it writes names, and a store that does not manage a bus is
told of), whether an embedded bus is
being served from the state directory (by 'meshctl watch'), the inventory of the last
successful apply (nodes, module instances, seats and their holders), the latest holder
changes, and the latest applies with who ran them, from which git commit, and how they
ended. It shows the state 'meshctl watch' left (STATE/watch.json, written when the state
changes): since when, the trigger and outcome of the reconcile that brought it, an invalid
description's problems or a refusal's reason, and whether that watch still runs. Per
node it shows whether the node enrolled, the generation the controller last declared to
it and the one it last reported applying, and the last heartbeat watch heard from it: watch records them in STATE/heartbeats.json when a node is first heard,
goes silent (30s without one) or comes back, and otherwise once a minute. For each
node's module instances it says who holds the credential: the node's agent (declared
to it by the controller), a host it was issued to by hand (kept when the node enrolled,
left alone by the agent), or nobody. It lists each consumer's dead letters, as 'meshctl
watch' counted them: the messages the consumer delivered max_deliver times without an
acknowledgement, which the server will not deliver again. And it lists what the
embedded bus refused lately, as 'meshctl watch' recorded it, one line per kind of
refusal (a user, an operation and the subjects of one rule: a client whose inbox prefix is
not set, refused a new random inbox on every connection, is one line): the latest subject,
how often, and the lines of YAML that would grant it or why none can.

While 'meshctl watch' serves the embedded bus, it also reads the bus, as the controller:
each seat's holder, whether the holder's worker is bound, and the work waiting in its
queue; and every consumer with work pending. An external bus is not served from the state
directory: given the description (-f DIR, as diff and apply take it), status reads the same
from the bus it names, as the controller, writing nothing.

Example:
  meshctl status
  meshctl status -f mesh/
  meshctl status -o json | jq '.history[0]'
`

func runStatus(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "status", statusHelp)
	dir := f.optionalDirFlag("with an external bus, status reads its seats and queues from it")
	sf := f.stateFlag()
	n := f.Int("n", 10, "how many holder changes, applies and refusals to show")
	out := f.outputFlag("text", "json")
	if done, code := f.parseNoArgs(args, "the state directory", "--state"); done {
		return code
	}
	if !checkFormat(e, *out, "text", "json") {
		return exitError
	}
	var m *model.Mesh
	if *dir != "" {
		var code int
		if m, code = loadDescription(ctx, e, *dir); code != exitOK {
			return code
		}
	}
	st, err := sf.openExisting()
	if err != nil {
		e.errorf("%v", err)
		return exitError
	}
	defer st.Close()
	r, err := readStatus(ctx, e, st, m, *n)
	if err != nil {
		e.errorf("%v", err)
		return exitError
	}
	if *out == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r)
		return exitOK
	}
	printStatus(e.stdout, r)
	return exitOK
}

// embeddedBusStatus is whether a meshctl process serves the embedded bus from the state
// directory, and at which URL and pid.
type embeddedBusStatus struct {
	Running bool   `json:"running"`
	URL     string `json:"url,omitempty"`
	PID     int    `json:"pid,omitempty"`
}

// statusReport is everything status shows, in the shape of its JSON output. Bus is the
// external bus the description given names, where the seats were read.
type statusReport struct {
	Store         string                      `json:"store"`
	EmbeddedBus   embeddedBusStatus           `json:"embedded_bus"`
	Bus           string                      `json:"bus,omitempty"`
	Watch         *watchSeen                  `json:"watch"`
	Inventory     state.Inventory             `json:"inventory"`
	HolderChanges []state.HolderChange        `json:"holder_changes"`
	History       []state.ApplyRecord         `json:"history"`
	Nodes         []controller.NodeStatus     `json:"nodes"`
	Heartbeats    heartbeatsSeen              `json:"heartbeats"`
	Seats         []controller.SeatWork       `json:"seats,omitempty"`
	Backlogs      []controller.Backlog        `json:"backlogs,omitempty"`
	Refusals      []state.Refusal             `json:"refusals"`
	DeadLetters   []state.ConsumerDeadLetters `json:"dead_letters"`
}

// readStatus reads what status shows from the store, the state directory and the bus: the
// embedded one while a meshctl process serves it, or the external one m names (m is nil
// without a description). It keeps the latest n holder changes, applies and refusals. What
// it cannot read of the heartbeats, watch's last state or the bus is left out, said on
// stderr; an error reading the store is returned.
func readStatus(ctx context.Context, e *env, st *state.Store, m *model.Mesh, n int) (statusReport, error) {
	var r statusReport
	var err error
	if r.Store, err = st.ID(ctx); err != nil {
		return r, err
	}
	if r.Inventory, err = st.Inventory(ctx); err != nil {
		return r, err
	}
	if r.HolderChanges, err = st.HolderChanges(ctx, n); err != nil {
		return r, err
	}
	if r.History, err = st.History(ctx, n); err != nil {
		return r, err
	}
	if r.Refusals, err = st.Refusals(ctx, n); err != nil {
		return r, err
	}
	if r.DeadLetters, err = st.DeadLetters(ctx); err != nil {
		return r, err
	}
	b := &r.EmbeddedBus
	b.URL, b.PID, b.Running = bus.RunningEmbeddedProcess(st.Dir())
	if r.Nodes, err = controller.Nodes(ctx, st, r.Inventory); err != nil {
		return r, err
	}
	if r.Heartbeats, err = withHeartbeats(r.Nodes, st.Dir(), time.Now()); err != nil {
		fmt.Fprintf(e.stderr, "the nodes' heartbeats are left out: %v\n", err)
	}
	if r.Watch, err = readWatchState(st.Dir()); err != nil {
		fmt.Fprintf(e.stderr, "watch's last state is left out: %v\n", err)
	}
	switch {
	case m != nil && !m.Bus.Embedded():
		r.Bus = m.Bus.URL
		if r.Seats, r.Backlogs, err = externalWork(ctx, e, st, m, r.Inventory); err != nil {
			fmt.Fprintf(e.stderr, "the seats' queues could not be read from the bus at %s: %v\n", r.Bus, err)
		}
	case b.Running:
		if r.Seats, r.Backlogs, err = liveWork(ctx, st, b.URL, r.Inventory); err != nil {
			fmt.Fprintf(e.stderr, "the seats' queues could not be read from the bus at %s: %v\n", b.URL, err)
		}
	}
	return r, nil
}

// externalWork reads the seats' queues and the consumers with work pending from the external
// bus m names, through a read-only session as the controller: no credential minted, no
// accounts config installed.
func externalWork(ctx context.Context, e *env, st *state.Store, m *model.Mesh, inv state.Inventory) ([]controller.SeatWork, []controller.Backlog, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sess, err := connect(ctx, e, m, st, reconcile.Options{ReadOnly: true})
	if err != nil {
		return nil, nil, err
	}
	defer sess.Close()
	return workOn(ctx, sess.Conn, inv)
}

// printStatus prints the status report as text.
func printStatus(out io.Writer, r statusReport) {
	inv := r.Inventory
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	// The identity the accounts files it writes name it by: the manager a refused store is told of.
	fmt.Fprintf(w, "State store:\t%s\n", r.Store)
	switch {
	case r.Bus != "":
		fmt.Fprintf(w, "Bus:\t%s, external (as the description names it)\n", r.Bus)
	case r.EmbeddedBus.Running:
		fmt.Fprintf(w, "Embedded bus:\t%s, served by meshctl pid %d\n", r.EmbeddedBus.URL, r.EmbeddedBus.PID)
	default:
		fmt.Fprintf(w, "Embedded bus:\tnot running (commands start one for their own run)\n")
	}
	fmt.Fprintf(w, "Last applied:\t%d node(s), %d module instance(s), %d seat(s)\n", len(inv.Nodes), len(inv.Instances), len(inv.Seats))
	printWatch(out, w, r.Watch)
	if len(inv.Holders) > 0 {
		fmt.Fprintln(out, "\nSeat holders:")
		for _, h := range inv.Holders {
			fmt.Fprintf(w, "  %s\t%s/%s\n", printable.Text(h.Seat), printable.Text(h.Node), printable.Text(h.Module))
		}
		_ = w.Flush()
	}
	printNodes(out, r.Nodes, r.Heartbeats)
	printWork(out, r.Seats, r.Backlogs)
	printRefusals(out, w, r.Refusals)
	printDeadLetters(out, w, r.DeadLetters)
	if len(r.HolderChanges) > 0 {
		fmt.Fprintln(out, "\nHolder changes (newest first):")
		for _, c := range r.HolderChanges {
			fmt.Fprintf(w, "  %s\t%s\t%s → %s\n", c.At.Local().Format(time.DateTime), printable.Text(c.Seat), instance(c.From), instance(c.To))
		}
		_ = w.Flush()
	}
	printApplies(out, w, r.History)
}

// printApplies lists the latest applies, newest first, with who ran them, from which commit
// and how they ended, or says that none is recorded.
func printApplies(out io.Writer, w *tabwriter.Writer, history []state.ApplyRecord) {
	if len(history) == 0 {
		fmt.Fprintln(out, "\nNo apply has been recorded in this state directory.")
		return
	}
	fmt.Fprintln(out, "\nApplies (newest first):")
	for _, h := range history {
		commit := h.Commit
		if len(commit) > 12 {
			commit = commit[:12] + map[bool]string{true: "-dirty", false: ""}[len(h.Commit) > 40]
		}
		fmt.Fprintf(w, "  %s\t%s@%s\t%s\t%s\t%s\n", h.Started.Local().Format(time.DateTime), printable.Text(h.User), printable.Text(h.Host),
			printable.Text(orDash(commit)), printable.Text(h.Summary), printable.Text(h.Outcome))
	}
	_ = w.Flush()
}

// printRefusals lists what the embedded bus refused lately, as `meshctl watch` recorded it,
// one line per kind, each with what the description would have to say to grant it or why
// nothing can.
func printRefusals(out io.Writer, w *tabwriter.Writer, refusals []state.Refusal) {
	if len(refusals) == 0 {
		return
	}
	fmt.Fprintln(out, "\nRefused by the bus (newest first):")
	for _, r := range refusals {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%d time(s)\t%s\n", r.LastAt.Local().Format(time.DateTime), printable.Text(r.User),
			refused(r.Op, r.Rule, r.Subject, r.Queue), r.Count, printable.Text(r.Advice))
	}
	_ = w.Flush()
}

// printDeadLetters lists each consumer's dead letters, as `meshctl watch` counted them: the
// messages it delivered max_deliver times without an acknowledgement, which the server will
// not deliver again.
func printDeadLetters(out io.Writer, w *tabwriter.Writer, counts []state.ConsumerDeadLetters) {
	if len(counts) == 0 {
		return
	}
	fmt.Fprintln(out, "\nDead letters (delivered max_deliver times, never acknowledged, not delivered again):")
	for _, c := range counts {
		fmt.Fprintf(w, "  %s\t%d\tlatest %s: message %d of the stream, delivered %d time(s)\n", printable.Text(c.Stream+"/"+c.Consumer),
			c.Count, c.LastAt.Local().Format(time.DateTime), c.LastStreamSeq, c.LastDeliveries)
	}
	_ = w.Flush()
}

// refused says what the bus refused, for a line of status or explain: the operation, the
// subject and any queue group, escaped, since the subject is whatever a client sent. Refusals
// of a rule that is not one subject (every inbox but the principal's own) are said as the rule
// and the latest subject.
func refused(op, rule, subject, queue string) string {
	what := op + " " + subject
	if rule != "" && rule != subject {
		what = op + " " + rule + " (latest " + subject + ")"
	}
	if queue != "" {
		what += " in queue group " + queue
	}
	return printable.Text(what)
}

func instance(i *state.Instance) string {
	if i == nil {
		return "none"
	}
	return printable.Text(i.Node + "/" + i.Module)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
