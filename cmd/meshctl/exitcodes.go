package main

import (
	"fmt"
	"strings"
)

// Exit codes, as scripts and CI read them. diff follows `kubectl diff`: 1 means "there
// are changes", which no other command exits with. An invalid description has a code of
// its own in every command, so CI can tell "the pull request broke the description" from
// "the runner could not do its job".
const (
	exitOK          = 0
	exitChanges     = 1
	exitError       = 2
	exitInvalid     = 3
	exitInterrupted = 130 // 128 + SIGINT, as shells report a command stopped by Ctrl-C
)

// exitCodes is the one table of what each exit code means. `meshctl help`, every
// command's --help and the README print it as exitCodeTable renders it; a test holds all
// of them, and every command on an invalid description, to it.
var exitCodes = []struct {
	code    int
	meaning string
}{
	{exitOK, "success; diff: nothing would change"},
	{exitChanges, "diff: changes pending (no other command exits 1)"},
	{exitError, "error: meshctl could not do what was asked (stderr says why, and what was done)"},
	{exitInvalid, "the description is invalid: every problem is printed as file:line:col: message, and nothing was changed"},
	{exitInterrupted, "stopped by SIGINT or SIGTERM before finishing (stderr says what was done); watch exits 0, stopping is how it ends"},
}

// exitCodeTable renders exitCodes for help texts and the README.
func exitCodeTable() string {
	var b strings.Builder
	b.WriteString("Exit codes:\n")
	for _, c := range exitCodes {
		fmt.Fprintf(&b, "  %-4d %s\n", c.code, c.meaning)
	}
	return b.String()
}
