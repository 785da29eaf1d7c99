package main

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A positional argument to a command that takes none is refused with the flag it was
// meant for. Ignored, `validate mesh/` validated the current directory and `apply mesh/
// --state X` applied another tree than the one named.
func TestCommandsRefusePositionalArguments(t *testing.T) {
	t.Parallel()
	dir, st := cliFixture(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"validate", dir}, `unexpected argument "` + dir + `": give the description with -f ` + dir},
		{[]string{"apply", dir, "--state", st}, `unexpected argument "` + dir + `": give the description with -f ` + dir},
		{[]string{"render", dir}, `unexpected argument "` + dir + `": give the description with -f ` + dir},
		{[]string{"graph", dir}, `unexpected argument "` + dir + `": give the description with -f ` + dir},
		{[]string{"diff", dir, "--state", st}, `unexpected argument "` + dir + `": give the description with -f ` + dir},
		{[]string{"watch", dir, "--state", st}, `unexpected argument "` + dir + `": give the description with -f ` + dir},
		{[]string{"status", st}, `unexpected argument "` + st + `": give the state directory with --state ` + st},
		{[]string{"validate", "-f", dir, "--", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args[:1], " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := meshctl(t, tc.args...)
			if code != exitError || stdout != "" || !strings.Contains(stderr, tc.want) {
				t.Errorf("meshctl %s: exit %d, stdout %q, stderr %q; want exit %d and %q",
					strings.Join(tc.args, " "), code, stdout, stderr, exitError, tc.want)
			}
		})
	}
	if _, err := os.Stat(st); !os.IsNotExist(err) {
		t.Errorf("a refused command created the state directory: %v", err)
	}
}

// One exit-code table: every command exits with its code for an invalid description, and
// `meshctl help`, each command's help and the README print the same table.
func TestOneExitCodeTable(t *testing.T) {
	t.Parallel()
	invalid := writeMesh(t, map[string]string{"mesh.yaml": "nodes:\n  - name: one\nmodules:\n  - name: shop\n    on: [two]\n"})
	valid, _ := cliFixture(t)
	// Every registered command is listed: a new command must say how it meets the table.
	onInvalid := map[string][][]string{
		"validate":    {{"-f", invalid}, {"-f", invalid, "-o", "json"}, {"-f", invalid, "-o", "github"}},
		"render":      {{"-f", invalid}, {"-f", invalid, "-o", "json"}},
		"diff":        {{"-f", invalid}, {"--from", valid, "-f", invalid}, {"--from", invalid, "-f", valid}},
		"apply":       {{"-f", invalid}, {"-f", invalid, "--dry-run"}},
		"credentials": {{"issue", "one.shop", "-f", invalid}, {"list", "-f", invalid}, {"revoke", "one.shop", "-f", invalid}},
		"explain":     {{"-f", invalid, "nats-server.log"}},
		"state":       {{"restore", "-f", invalid, "--controller-password-file", "controller.password"}},
		// watch reports an invalid tree and keeps running: the last good state stays live
		// (watch's own tests hold it to that).
		"watch": nil,
		// status reads no description, and neither does the agent: the controller validates
		// the description and declares to the node what it runs.
		"status": nil,
		"agent":  nil,
		// schema prints the description's JSON Schema and reads no description.
		"schema": nil,
		"graph":  {{"-f", invalid}, {"-f", invalid, "-o", "dot", "--by-node"}},
	}
	for name := range commands {
		if _, ok := onInvalid[name]; !ok {
			t.Errorf("command %s is not in this test: what does it exit with on an invalid description?", name)
		}
	}
	for name, runs := range onInvalid {
		for _, args := range runs {
			args := append([]string{name}, args...)
			if name != "validate" && name != "explain" && name != "graph" { // the three that read no state
				args = append(args, "--state", filepath.Join(t.TempDir(), "state"))
			}
			code, stdout, stderr := meshctl(t, args...)
			if code != exitInvalid || !strings.Contains(stdout+stderr, "mesh.yaml") {
				t.Errorf("meshctl %s: exit %d, want %d (the table's \"invalid\"); stderr:\n%s", strings.Join(args, " "), code, exitInvalid, stderr)
			}
		}
	}

	table := exitCodeTable()
	for _, c := range exitCodes {
		if !strings.Contains(table, c.meaning) {
			t.Errorf("the table lacks code %d", c.code)
		}
	}
	if _, out, _ := meshctl(t, "help"); !strings.Contains(out, table) {
		t.Errorf("meshctl help does not print the table:\n%s", out)
	}
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		code, out, _ := meshctl(t, n, "--help")
		if code != exitOK || !strings.Contains(out, table) {
			t.Errorf("meshctl %s --help does not print the table:\n%s", n, out)
		}
		// No help may state exit codes of its own beside the table.
		if before, _, _ := strings.Cut(out, table); strings.Contains(strings.ToLower(before), "exit 0") || strings.Contains(strings.ToLower(before), "exit 2") {
			t.Errorf("meshctl %s --help states exit codes outside the table:\n%s", n, before)
		}
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```text\n"+table+"```\n") {
		t.Errorf("README.md does not hold the exit-code table as meshctl prints it:\n%s", table)
	}
}

// status reads a state directory; it never makes one. A mistyped --state reported "No apply
// has been recorded" and left a new store behind.
func TestStatusRefusesAStateDirectoryThatDoesNotExist(t *testing.T) {
	t.Parallel()
	typo := filepath.Join(t.TempDir(), "typo")
	code, stdout, stderr := meshctl(t, "status", "--state", typo)
	if code != exitError || stdout != "" || !strings.Contains(stderr, typo) || !strings.Contains(stderr, "--state") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := os.Stat(typo); !os.IsNotExist(err) {
		t.Errorf("status created %s: %v", typo, err)
	}
	// An existing directory that holds no store is no state directory either.
	empty := t.TempDir()
	if code, _, _ := meshctl(t, "status", "--state", empty); code != exitError {
		t.Errorf("status of an empty directory: exit %d", code)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("status wrote into %s: %v", empty, entries)
	}
}

// Each command lists the flags it uses and no other: status mints nothing, so it has no
// --bcrypt-cost, and neither has diff, which writes nothing.
func TestHelpListsOnlyTheFlagsACommandUses(t *testing.T) {
	t.Parallel()
	for cmd, has := range map[string]bool{"status": false, "diff": false, "render": false, "validate": false,
		"apply": true, "credentials": true, "watch": true} {
		_, out, _ := meshctl(t, cmd, "--help")
		if got := strings.Contains(out, "-bcrypt-cost"); got != has {
			t.Errorf("meshctl %s --help lists -bcrypt-cost: %v, want %v", cmd, got, has)
		}
	}
}

// diff, validate, render and apply --dry-run change nothing, the state directory included:
// a diff on a fresh state directory wrote controller.password and bus/accounts.conf.
func TestReadingCommandsNeverWriteTheStateDirectory(t *testing.T) {
	t.Parallel()
	dir, _ := cliFixture(t)
	missing := filepath.Join(t.TempDir(), "state")
	// A fresh directory: nothing applied, so the embedded bus would start empty.
	code, stdout, stderr := meshctl(t, "diff", "-f", dir, "--state", missing)
	if code != exitChanges || !strings.Contains(stdout, "+ stream SEAT_MAILER") || !strings.Contains(stderr, "nothing has been applied from "+missing) {
		t.Errorf("diff on a fresh state directory: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("diff created the state directory: %v", err)
	}
	if code, _, stderr := meshctl(t, "apply", "--dry-run", "-f", dir, "--state", missing); code != exitOK || !strings.Contains(stderr, "nothing was changed") {
		t.Errorf("apply --dry-run on a fresh state directory: exit %d %s", code, stderr)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("apply --dry-run created the state directory: %v", err)
	}
	if code, _, stderr := meshctl(t, "render", "-f", dir, "--state", missing); code != exitError || !strings.Contains(stderr, missing) {
		t.Errorf("render of a missing state directory: exit %d %s", code, stderr)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("render created the state directory: %v", err)
	}
	if code, _, _ := meshctl(t, "validate", "-f", dir); code != exitOK {
		t.Errorf("validate: exit %d", code)
	}

	// A state directory that exists (credentials issued, nothing applied yet): diff reads,
	// and writes none of its files.
	st := filepath.Join(t.TempDir(), "state")
	if code, _, stderr := meshctl(t, "credentials", "issue", "alpha.shop", "-f", dir, "--state", st, "--bcrypt-cost", "4"); code != exitOK {
		t.Fatalf("credentials issue: %s", stderr)
	}
	before := snapshot(t, st)
	code, stdout, stderr = meshctl(t, "diff", "-f", dir, "--state", st)
	if code != exitChanges || !strings.Contains(stdout, "alpha.shop") {
		t.Errorf("diff with credentials but no apply: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if code, _, stderr := meshctl(t, "render", "-f", dir, "--state", st); code != exitOK {
		t.Errorf("render --state: exit %d %s", code, stderr)
	}
	if after := snapshot(t, st); !maps.Equal(before, after) {
		t.Errorf("diff or render changed the state directory:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := os.Stat(filepath.Join(st, "controller.password")); !os.IsNotExist(err) {
		t.Errorf("diff minted the controller's credential: %v", err)
	}
}

// snapshot is every file under dir and its contents, but SQLite's own -wal and -shm files,
// which opening a database to read it may create and remove.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || strings.HasSuffix(path, "-wal") || strings.HasSuffix(path, "-shm") {
			return err
		}
		data, err := os.ReadFile(path)
		files[path] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// The README's code layout names every package of the module, so a package added or renamed
// cannot leave the map a new engineer reads first behind.
func TestTheCodeLayoutNamesEveryPackage(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(readme), "\n### Code layout\n")
	if !ok {
		t.Fatal("README.md has no Code layout section")
	}
	if end := strings.Index(layout, "\n#"); end >= 0 {
		layout = layout[:end]
	}
	// The packages a row names are the code spans of its first cell; internal's helpers are
	// named in the second cell of the row whose first is internal/….
	named, internal := map[string]bool{}, ""
	for _, row := range strings.Split(layout, "\n") {
		cells := strings.Split(row, "|")
		if !strings.HasPrefix(row, "| `") || len(cells) < 3 {
			continue
		}
		spans := strings.Split(cells[1], "`")
		for i := 1; i < len(spans); i += 2 {
			named[spans[i]] = true
		}
		if strings.Contains(cells[1], "`internal/") {
			internal = cells[2]
		}
	}
	out, err := exec.Command("go", "list", "github.com/meshbus/meshctl/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(pkg, "github.com/meshbus/meshctl/")
		if base, inInternal := strings.CutPrefix(rel, "internal/"); inInternal {
			if !strings.Contains(internal, "`"+base+"`") {
				t.Errorf("README.md's Code layout does not name %s in the internal row", rel)
			}
		} else if !named[rel] {
			t.Errorf("README.md's Code layout has no row naming %s", rel)
		}
	}
}
