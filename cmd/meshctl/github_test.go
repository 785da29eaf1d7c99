package main

import (
	"strings"
	"testing"
)

// A file name is data an attacker chooses (a pull request from a fork adds files), and the
// runner reads every line of a step's output as a possible workflow command. A name holding
// newlines must not end one annotation and forge another, nor may ',' and ':' in it add or
// end properties of the annotation it belongs to.
func TestValidateGithubCannotBeMadeToForgeAWorkflowCommand(t *testing.T) {
	t.Parallel()
	forged := "evil\n::warning file=README.md,line=1::INJECTED\nx.yaml"
	props := "a,line=99,col=1::b.yaml"
	dir := writeMesh(t, map[string]string{
		forged: "nodes:\n  - name: Bad\n",
		props:  "nodes:\n  - name: Worse\n",
	})
	code, stdout, stderr := meshctl(t, "validate", "-f", dir, "-o", "github")
	if code != exitInvalid {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitInvalid, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 annotations, one per problem, got %d lines:\n%s", len(lines), stdout)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "::error file=") {
			t.Errorf("not an error annotation: %q", l)
		}
	}
	// The name that is not printable text is refused unread, and annotated on the
	// directory: the name itself is only in the (escaped) message. The other is read, and
	// its properties escaped.
	wantFile := map[string]bool{
		"file=" + dir + "::": true,
		"file=" + dir + "/a%2Cline=99%2Ccol=1%3A%3Ab.yaml,line=2,col=11::": true,
	}
	for _, l := range lines {
		_, rest, _ := strings.Cut(l, "::error ")
		head, _, _ := strings.Cut(rest, "::")
		if !wantFile[head+"::"] {
			t.Errorf("properties not escaped as the toolkit's escapeProperty does:\n got %s", head)
		}
	}

	// Text output lands in the same log: no line of it may start a workflow command either.
	_, stdout, stderr = meshctl(t, "validate", "-f", dir)
	for _, l := range strings.Split(stdout+stderr, "\n") {
		if strings.HasPrefix(l, "::") {
			t.Errorf("a text line the runner reads as a workflow command: %q", l)
		}
	}
}

// The two escapes of @actions/core (toolkit packages/core/src/command.ts).
func TestGithubEscapes(t *testing.T) {
	t.Parallel()
	if got := escapeData("100% done\r\nnext: a,b"); got != "100%25 done%0D%0Anext: a,b" {
		t.Errorf("escapeData: %q", got)
	}
	if got := escapeProperty("100% done\r\nnext: a,b"); got != "100%25 done%0D%0Anext%3A a%2Cb" {
		t.Errorf("escapeProperty: %q", got)
	}
}
