package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/meshbus/meshctl/model"
)

// GitHub's runner reads every line a step prints as a possible workflow command
// (`::error file=…,line=…::message`). A file name or a message is data a pull request
// chooses, so each part is escaped exactly as the runner's own toolkit escapes it
// (@actions/core, src/command.ts): otherwise a newline in a file name ends the annotation
// and the next line forges a command of the attacker's choosing, and a ',' or ':' in a
// property adds properties or ends them early.

// escapeData escapes a workflow command's message, as the toolkit's escapeData does.
func escapeData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

// escapeProperty escapes a workflow command's property value (file=…), as the toolkit's
// escapeProperty does: escapeData's three, and the separators ':' and ','.
func escapeProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// writeAnnotation prints one diagnostic as a GitHub error annotation on its file and line.
// A problem about a whole file or directory has no line, and is annotated on the file.
func writeAnnotation(w io.Writer, dir string, d model.Diagnostic) {
	where := "file=" + escapeProperty(githubPath(dir, d.Pos.File))
	if d.Pos.Line > 0 {
		where += fmt.Sprintf(",line=%d,col=%d", d.Pos.Line, d.Pos.Col)
	}
	fmt.Fprintf(w, "::error %s::%s\n", where, escapeData(d.Message))
}
