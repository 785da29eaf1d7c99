// Package graph draws who talks to whom in a mesh: its modules (or, by node, their
// instances), its seats and the controller as vertices, and as edges the events each follows
// (emitter → follower), the work each sends to a seat, the tools each calls and the seats
// each holds. A reviewer reading permission lists learns subject by subject that a new module
// may now read the shop's orders; the picture shows it as one new arrow.
//
// It owns the picture as a value (Of), the comparison of two pictures (Diff, and Changed for
// the part a change touches with its neighbours) and the picture's writing in two languages,
// Mermaid (which GitHub renders in a pull request) and Graphviz's DOT, with the escaping that
// keeps every name inside its label: names come from YAML, and a quote, a bracket, a line
// break or an arrow in one must not end its label and draw something of its own.
//
// It is pure: a validated model in, a value out, text to an io.Writer. It reads no file,
// derives nothing about the bus (subjects and grants are the render package's) and knows
// nothing of plans; the plan package asks it for the picture of a change.
package graph
