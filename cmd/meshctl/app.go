package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/meshbus/meshctl/model"
)

// command is one subcommand: its one-line summary for `meshctl help`, and its entry point.
type command struct {
	summary string
	run     func(ctx context.Context, env *env, args []string) int
	// stopsCleanly marks the command whose normal end is a signal (watch): it exits 0 when
	// it has stopped, however long stopping takes, instead of being abandoned after
	// stopGrace.
	stopsCleanly bool
	// runsLong marks a command that runs until it is stopped (watch, agent): it keeps the
	// garbage collector's default pace, which a one-shot command sets for itself (gc.go).
	runsLong bool
}

// env is what every subcommand gets: where to read and write, and nothing global.
type env struct {
	// stdin is read only where an argument says so (`explain -`): a command never waits on a
	// terminal nobody types into.
	stdin          io.Reader
	stdout, stderr io.Writer
}

// errorf prints an error line on stderr.
func (e *env) errorf(format string, args ...any) {
	fmt.Fprintf(e.stderr, "meshctl: "+format+"\n", args...)
}

// commands is the CLI, as data. Each entry's file holds its flags and its help text.
var commands = map[string]command{}

func register(name string, c command) { commands[name] = c }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdin: os.Stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		usage(stderr)
		return exitError
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run(ctx, e, []string{"--help"})
			}
		}
		usage(stdout)
		return exitOK
	case "version", "--version":
		fmt.Fprintln(stdout, "meshctl", version)
		return exitOK
	}
	c, ok := commands[name]
	if !ok {
		e.errorf("unknown command %q%s; run `meshctl help` for the list", name, suggestCommand(name))
		return exitError
	}
	return c.run(ctx, e, args[1:])
}

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func usage(w io.Writer) {
	fmt.Fprint(w, `meshctl keeps a NATS JetStream bus equal to a mesh described in YAML.

Usage: meshctl <command> [flags]

Commands:
`)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, `
Run 'meshctl <command> --help' for a command's flags and examples.

`)
	fmt.Fprint(w, exitCodeTable())
}

func suggestCommand(name string) string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	if best := model.Suggest(name, names); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// flags is a subcommand's flag set with the help text that teaches it.
type flags struct {
	*flag.FlagSet
	e    *env
	help string
}

func newFlags(e *env, name, help string) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &flags{FlagSet: fs, e: e, help: help}
}

// parse reads flags wherever they stand among the arguments (`issue node.one -f mesh/`
// reads as well as `issue -f mesh/ node.one`) and returns the positional arguments. On
// --help it prints the help and returns done with exitOK; on a bad flag, done with exitError.
func (f *flags) parse(args []string) (positional []string, done bool, code int) {
	for {
		err := f.FlagSet.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			f.printHelp(f.e.stdout)
			return nil, true, exitOK
		}
		if err != nil {
			f.e.errorf("%s: %v", f.Name(), err)
			fmt.Fprintf(f.e.stderr, "Run 'meshctl %s --help' for usage.\n", f.Name())
			return nil, true, exitError
		}
		rest := f.Args()
		if len(rest) == 0 {
			return positional, false, exitOK
		}
		if rest[0] == "--" {
			return append(positional, rest[1:]...), false, exitOK
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// parseNoArgs is parse for a command that takes no arguments. One given is refused, naming
// the flag it was likely meant for (`validate mesh/` → -f mesh/): ignored, it would have the
// command work on another tree, or another state directory, than the one the operator named.
func (f *flags) parseNoArgs(args []string, what, flagName string) (done bool, code int) {
	positional, done, code := f.parse(args)
	if done {
		return done, code
	}
	if len(positional) > 0 {
		f.e.errorf("unexpected argument %q: give %s with %s %s", positional[0], what, flagName, positional[0])
		fmt.Fprintf(f.e.stderr, "Run 'meshctl %s --help' for usage.\n", f.Name())
		return true, exitError
	}
	return false, exitOK
}

func (f *flags) printHelp(w io.Writer) {
	fmt.Fprintln(w, strings.TrimSpace(f.help))
	fmt.Fprintln(w, "\nFlags:")
	f.SetOutput(w)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
	fmt.Fprintln(w)
	fmt.Fprint(w, exitCodeTable())
}

// dirFlag is -f: the directory holding the mesh description.
func (f *flags) dirFlag() *string {
	def := os.Getenv("MESHCTL_DIR")
	if def == "" {
		def = "."
	}
	p := f.String("f", def, "directory of the mesh description (*.yaml, *.yml, recursively); $MESHCTL_DIR")
	return p
}

// optionalDirFlag is -f for a command that works without a description (status): it
// defaults to $MESHCTL_DIR alone, not to the current directory, so a run outside the mesh's
// checkout loads no stray YAML.
func (f *flags) optionalDirFlag(what string) *string {
	return f.String("f", os.Getenv("MESHCTL_DIR"), "directory of the mesh description (*.yaml, *.yml, recursively): "+what+"; $MESHCTL_DIR")
}

// outputFlag is -o with the formats a command supports, the first being the default.
func (f *flags) outputFlag(formats ...string) *string {
	return f.String("o", formats[0], "output format: "+strings.Join(formats, ", "))
}

func checkFormat(e *env, got string, formats ...string) bool {
	for _, f := range formats {
		if got == f {
			return true
		}
	}
	e.errorf("unknown output format %q; use one of: %s", got, strings.Join(formats, ", "))
	return false
}
