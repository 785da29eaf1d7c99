package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/controller"
	"github.com/meshbus/meshctl/internal/printable"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/watch"
)

// heartbeatsSeen is what status says of the heartbeats watch recorded: when, whether a watch is
// still recording them, and nothing at all when none was.
type heartbeatsSeen struct {
	RecordedAt time.Time `json:"recorded_at,omitzero"`
	// Current is whether a running watch keeps them: false, they are what a watch that
	// stopped left behind.
	Current bool `json:"current"`
}

// withHeartbeats adds to nodes the last heartbeat of each that watch recorded in the state
// directory (watch.HeartbeatsFileName). No file is no heartbeats: no watch ran a controller here.
func withHeartbeats(nodes []controller.NodeStatus, stateDir string, now time.Time) (heartbeatsSeen, error) {
	h, err := watch.ReadHeartbeats(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return heartbeatsSeen{}, nil
	}
	if err != nil {
		return heartbeatsSeen{}, err
	}
	for i := range nodes {
		if s, ok := h.Nodes[nodes[i].Node]; ok {
			nodes[i].Heartbeat, nodes[i].Silent = &s, h.Stale(nodes[i].Node)
		}
	}
	return heartbeatsSeen{RecordedAt: h.WrittenAt, Current: h.Current(now)}, nil
}

// printNodes writes the live mesh's nodes as the controller recorded them: enrolled or not, the
// generation declared and the one reported, what the last report could not apply, and the last
// heartbeat watch heard.
func printNodes(out io.Writer, nodes []controller.NodeStatus, beats heartbeatsSeen) {
	if len(nodes) == 0 {
		return
	}
	fmt.Fprintln(out, "\nNodes:")
	switch {
	case beats.RecordedAt.IsZero():
		fmt.Fprintln(out, "  (no heartbeats recorded: watch records them while it runs)")
	case !beats.Current:
		fmt.Fprintf(out, "  (heartbeats as watch recorded them at %s; no watch records them now)\n", beats.RecordedAt.Local().Format(time.DateTime))
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  NODE\tENROLLED\tDECLARED\tREPORTED\tLAST REPORT\tLAST HEARTBEAT\tSTATE")
	for _, n := range nodes {
		beat := "-"
		if n.Heartbeat != nil {
			beat = n.Heartbeat.At.Local().Format(time.DateTime)
			if n.Silent {
				beat += " (silent)"
			}
		}
		enrolled, last, state := "no", "-", "not enrolled"
		if n.Enrolled {
			enrolled = n.EnrolledAt.Local().Format(time.DateTime)
			state = "converging"
		}
		if !n.ReportedAt.IsZero() {
			last = n.ReportedAt.Local().Format(time.DateTime)
		}
		switch {
		case n.Converged():
			state = "at the declared generation"
		case len(n.Failed) > 0:
			state = fmt.Sprintf("%d instance(s) not applied", len(n.Failed))
		}
		fmt.Fprintf(w, "  %s\t%s\t%d\t%d\t%s\t%s\t%s\n", printable.Text(n.Node), enrolled, n.Declared, n.Reported, last, beat, state)
	}
	_ = w.Flush()
	printInstanceCredentials(out, nodes)
}

// heldBy says who holds an instance's credential, for status's text.
var heldBy = map[string]string{
	controller.HeldByAgent:  "agent",
	controller.HeldByHand:   "by hand",
	controller.HeldByNobody: "none: cannot log in",
}

// printInstanceCredentials writes who holds each node's instances' credentials: the node's
// agent, or the host an operator issued one to by hand, which enrolling kept and the agent
// leaves alone.
func printInstanceCredentials(out io.Writer, nodes []controller.NodeStatus) {
	if !slices.ContainsFunc(nodes, func(n controller.NodeStatus) bool { return len(n.Instances) > 0 }) {
		return
	}
	fmt.Fprintln(out, "\nInstance credentials (agent: declared to the node's agent; by hand: issued with 'meshctl credentials issue',")
	fmt.Fprintln(out, "kept when the node enrolled and left alone by its agent; 'meshctl credentials revoke' hands one to the agent):")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  NODE\tINSTANCE\tHELD BY")
	for _, n := range nodes {
		for _, in := range n.Instances {
			fmt.Fprintf(w, "  %s\t%s\t%s\n", printable.Text(n.Node), printable.Text(in.User), heldBy[in.Credential])
		}
	}
	_ = w.Flush()
}

// liveWork reads, from the embedded bus a running `meshctl watch` serves, each seat's queue and
// worker and every consumer with work pending. It says why when it could not: with no embedded
// bus running, status reads only the store.
func liveWork(ctx context.Context, st *state.Store, url string, inv state.Inventory) ([]controller.SeatWork, []controller.Backlog, error) {
	// The stored credential only: status changes nothing, a missing credential included.
	password, err := st.StoredControllerPassword(ctx)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := busclient.Dial(ctx, busclient.Target{URL: url}, busclient.Credential{User: render.ControllerUser, Password: password})
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	return workOn(ctx, conn, inv)
}

// workOn reads each seat's queue and worker and every consumer with work pending through
// conn, a connection as the controller.
func workOn(ctx context.Context, conn *busclient.Conn, inv state.Inventory) ([]controller.SeatWork, []controller.Backlog, error) {
	js, err := jetstream.New(conn.Conn)
	if err != nil {
		return nil, nil, err
	}
	holders := map[string]string{}
	for _, h := range inv.Holders {
		holders[h.Seat] = render.InstanceUser(model.Instance{Node: h.Node, Module: h.Module})
	}
	seats, err := controller.Seats(ctx, js, inv.Seats, holders)
	if err != nil {
		return nil, nil, err
	}
	backlogs, err := controller.Backlogs(ctx, js)
	return seats, backlogs, err
}

// printWork writes the seats' queues and the consumers with work pending.
func printWork(out io.Writer, seats []controller.SeatWork, backlogs []controller.Backlog) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if len(seats) > 0 {
		fmt.Fprintln(out, "\nSeats on the bus:")
		fmt.Fprintln(w, "  SEAT\tHOLDER\tWORKER\tWAITING\tUNACKED")
		for _, s := range seats {
			bound := "not bound"
			if s.Bound {
				bound = "bound"
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%d\t%d\n", printable.Text(s.Seat), printable.Text(orDash(s.Holder)), bound, s.Waiting, s.Unacknowledged)
		}
		_ = w.Flush()
	}
	if len(backlogs) > 0 {
		fmt.Fprintln(out, "\nConsumers with work pending:")
		fmt.Fprintln(w, "  STREAM\tCONSUMER\tPENDING\tUNACKED")
		for _, b := range backlogs {
			fmt.Fprintf(w, "  %s\t%s\t%d\t%d\n", printable.Text(b.Stream), printable.Text(b.Consumer), b.Pending, b.Unacknowledged)
		}
		_ = w.Flush()
	}
}
