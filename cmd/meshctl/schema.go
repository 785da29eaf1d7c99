package main

import (
	"context"

	"github.com/meshbus/meshctl/model"
)

func init() {
	register("schema", command{summary: "print the JSON Schema of a mesh description, for editors", run: runSchema})
}

const schemaHelp = `
Usage: meshctl schema > mesh.schema.json

Prints the JSON Schema (draft 2020-12) of one YAML document of a mesh description: which keys
each section holds and what kind of value each takes. It is written from the same table of keys
the loader checks, so an editor using it flags a misspelt key or a list where a name belongs
as you type. The loader checks more than any schema can (names' rules, references, addresses):
run meshctl validate before you apply.

Point an editor with the YAML language server (VS Code's YAML extension, Neovim, Helix) at it
with a comment at the top of each description file, the path relative to that file. The
schema is JSON, not *.yaml, so it may sit in the description's directory without becoming part
of the mesh:

  meshctl schema > mesh/mesh.schema.json
  # first line of mesh/mesh.yaml:
  # yaml-language-server: $schema=mesh.schema.json

Run it again after upgrading meshctl: the schema is that version's.
`

func runSchema(_ context.Context, e *env, args []string) int {
	f := newFlags(e, "schema", schemaHelp)
	if positional, done, code := f.parse(args); done {
		return code
	} else if len(positional) > 0 {
		e.errorf("schema takes no arguments; it prints the schema on stdout (meshctl schema > mesh.schema.json)")
		return exitError
	}
	if _, err := e.stdout.Write(model.Schema()); err != nil {
		e.errorf("writing the schema: %v", err)
		return exitError
	}
	return exitOK
}
