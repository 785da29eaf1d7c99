package main

import (
	"context"

	"github.com/meshbus/meshctl/graph"
)

func init() {
	register("graph", command{summary: "draw who talks to whom in the mesh, as Mermaid or Graphviz DOT", run: runGraph})
}

const graphHelp = `
Usage: meshctl graph [-f DIR] [-o mermaid|dot] [--by-node]

Draws the mesh the description in DIR declares: who talks to whom. Modules are boxes,
seats hexagons and the controller a rounded box; each arrow is something the description
declares:

  shop --order.placed--> audit           audit follows shop's event order.placed
  shop --sends send--> telegram-sender   shop sends work to the seat's accept "send"
  ledger --calls status--> telegram      ledger calls a tool telegram serves
  telegram --holds--> telegram-sender    telegram holds the seat: it takes the seat's work

A seat's events come from the seat itself, whichever instance holds it. The picture is the
description's, as validate reads it: it reads no bus and no state directory, and a
description with problems is reported as validate reports it, each as file:line:col.
The output is sorted, so the same description draws the same text, fit to keep in git and
to diff.

With --by-node each module instance is drawn on its own, inside a box for the node it runs
on, and an event goes from every instance emitting it to every instance following it.

  -o mermaid  a Mermaid flowchart: GitHub, GitLab and most wikis draw it inside a
              ` + "```mermaid" + ` block of Markdown
  -o dot      Graphviz's DOT: dot -Tsvg draws it (apt-get install graphviz)

'meshctl diff --from OLD -f NEW -o markdown' draws, in the same way, only what a change
connects and disconnects.

Examples:
  meshctl graph -f mesh/ > mesh.mmd
  meshctl graph -f mesh/ -o dot --by-node | dot -Tsvg > mesh.svg
`

// graphFormats are the languages a graph is written in, the first the default.
var graphFormats = []string{"mermaid", "dot"}

func runGraph(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "graph", graphHelp)
	dir := f.dirFlag()
	out := f.outputFlag(graphFormats...)
	byNode := f.Bool("by-node", false, "draw each module instance inside the node it runs on")
	if done, code := f.parseNoArgs(args, "the description", "-f"); done {
		return code
	}
	if !checkFormat(e, *out, graphFormats...) {
		return exitError
	}
	m, code := loadDescription(ctx, e, *dir)
	if code != exitOK {
		return code
	}
	g := graph.Of(m, graph.Options{ByNode: *byNode})
	write := g.Mermaid
	if *out == "dot" {
		write = g.DOT
	}
	if err := write(e.stdout); err != nil {
		e.errorf("writing the graph: %v", err)
		return exitError
	}
	return exitOK
}
