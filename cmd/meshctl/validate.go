package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/meshbus/meshctl/internal/printable"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

func init() {
	register("validate", command{summary: "check a mesh description and report every problem", run: runValidate})
}

const validateHelp = `
Usage: meshctl validate [-f DIR] [-o text|json|github]

Loads every *.yaml and *.yml file under DIR and checks the description: its shape, every
name rule and every reference. It reports every problem at once, each as
file:line:col: message, and changes nothing anywhere.

  -o text     file:line:col: message lines, which editors and CI logs link
  -o json     {"valid": bool, "diagnostics": [{"pos": {...}, "message": ...}], "total": N}
              (the first 100 problems are listed; total counts them all), and for a
              valid description "footprint": {"file": BYTES, "memory": BYTES,
              "unlimited": [STREAM...]}
  -o github   GitHub Actions workflow annotations (::error file=...,line=...,col=...::...)

A valid description's footprint is said on stderr too: the sum of its streams' byte
limits, what the mesh may hold on each server ('this mesh may hold up to 1.4 GiB on
disk on each server'), which 'meshctl apply' compares with what the bus has.

Example:
  meshctl validate -f mesh/
`

func runValidate(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "validate", validateHelp)
	dir := f.dirFlag()
	out := f.outputFlag("text", "json", "github")
	if done, code := f.parseNoArgs(args, "the description", "-f"); done {
		return code
	}
	if !checkFormat(e, *out, "text", "json", "github") {
		return exitError
	}
	m, err := loadMesh(ctx, *dir)
	var diags []model.Diagnostic
	var lerr *model.LoadError
	total := 0 // problems found; diags holds the first model.MaxDiagnostics of them
	switch {
	case errors.As(err, &lerr):
		diags, total = lerr.Diagnostics, lerr.Total
	case err != nil:
		e.errorf("%v", err)
		return exitError
	}
	var footprint *render.Footprint
	if m != nil {
		f := render.FootprintOf(render.DeriveStreams(m))
		footprint = &f
	}
	switch *out {
	case "json":
		if diags == nil {
			diags = []model.Diagnostic{}
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		doc := map[string]any{"valid": len(diags) == 0, "diagnostics": diags, "total": total}
		if footprint != nil {
			doc["footprint"] = footprint
		}
		_ = enc.Encode(doc)
	case "github":
		for _, d := range diags {
			writeAnnotation(e.stdout, *dir, d)
		}
	default:
		for _, d := range diags {
			fmt.Fprintf(e.stdout, "%s\n", joinPos(*dir, d))
		}
	}
	if more := total - len(diags); more > 0 && *out != "json" {
		fmt.Fprintf(e.stdout, "… and %d more problem(s)\n", more)
	}
	if len(diags) > 0 {
		fmt.Fprintf(e.stderr, "%d problem(s) in the description in %s\n", total, *dir)
		return exitInvalid
	}
	fmt.Fprintf(e.stderr, "the description in %s is valid: %d node(s), %d seat(s), %d module instance(s)\n%s\n",
		*dir, len(m.Nodes), len(m.Seats), len(m.Instances()), footprint)
	return exitOK
}

// joinPos prints a diagnostic with its file relative to the current directory, so an
// editor or terminal can open it as printed, on one line whatever the file is named.
func joinPos(dir string, d model.Diagnostic) string {
	d.Pos.File = printable.Text(githubPath(dir, d.Pos.File))
	d.Message = printable.Text(d.Message)
	return d.String()
}

func githubPath(dir, file string) string {
	if file == "." { // a problem with the directory itself
		return dir
	}
	if dir == "." || dir == "" {
		return file
	}
	return strings.TrimSuffix(dir, "/") + "/" + file
}
