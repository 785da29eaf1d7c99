package model_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/meshbus/meshctl/model"
)

// FuzzParse feeds arbitrary bytes to Parse as zero, one or two files. Whatever the input,
// Parse must not panic, and must return either a mesh that keeps the model's promises or a
// *LoadError whose every diagnostic points into a file it was given.
func FuzzParse(f *testing.F) {
	f.Add(uint8(0), []byte(nil), []byte(nil))
	cases, err := os.ReadDir("testdata")
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range cases {
		if !c.IsDir() || c.Name() == "fuzz" {
			continue
		}
		files, err := model.ReadDir(filepath.Join("testdata", c.Name()))
		if err != nil && !errors.Is(err, model.ErrInvalid) {
			f.Fatal(err) // a case with an entry Load refuses still seeds its readable files
		}
		switch len(files) {
		case 0:
		case 1:
			f.Add(uint8(1), files[0].Data, []byte(nil))
		default:
			f.Add(uint8(2), files[0].Data, files[1].Data)
		}
	}
	f.Fuzz(func(t *testing.T, n uint8, first, second []byte) {
		files := []model.File{{Name: "a.yaml", Data: first}, {Name: "b.yaml", Data: second}}[:n%3]
		m, err := model.Parse(files)
		if err == nil {
			if m == nil {
				t.Fatal("Parse returned neither a mesh nor an error")
			}
			checkMesh(t, m)
			return
		}
		if m != nil {
			t.Errorf("Parse returned both a mesh and an error: %v", err)
		}
		var lerr *model.LoadError
		if !errors.As(err, &lerr) || !errors.Is(err, model.ErrInvalid) {
			t.Fatalf("Parse returned %T (%v), want a *LoadError wrapping ErrInvalid", err, err)
		}
		if len(lerr.Diagnostics) == 0 {
			t.Fatal("Parse returned a *LoadError without diagnostics")
		}
		for i, d := range lerr.Diagnostics {
			switch {
			case d.Message == "":
				t.Errorf("diagnostic %d at %s has no message", i, d.Pos)
			case len(files) == 0 && d.Pos.File != ".":
				t.Errorf("diagnostic %q: with no files, want it about the directory \".\"", d)
			case len(files) > 0 && !slices.ContainsFunc(files, func(f model.File) bool { return f.Name == d.Pos.File }):
				t.Errorf("diagnostic %q names a file that was not given", d)
			case len(files) > 0 && (d.Pos.Line < 1 || d.Pos.Col < 1) && d.Pos != (model.Pos{File: d.Pos.File}):
				t.Errorf("diagnostic %q: want line and column >= 1, or both 0 for the whole file", d)
			}
			if i > 0 {
				prev := lerr.Diagnostics[i-1].Pos
				if prev.File > d.Pos.File || prev.File == d.Pos.File && prev.Line > d.Pos.Line {
					t.Errorf("diagnostic %q comes after one at %s: want them sorted", d, prev)
				}
			}
		}
	})
}

var validName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// checkMesh checks the promises of a loaded mesh: names follow the rules, each is declared
// once, every reference names something declared, and every seat's holder is an instance
// that claims it.
func checkMesh(t *testing.T, m *model.Mesh) {
	t.Helper()
	names := func(what string, list []string) map[string]bool {
		set := map[string]bool{}
		for _, n := range list {
			if !validName.MatchString(n) {
				t.Errorf("%s name %q breaks the naming rule", what, n)
			}
			if set[n] {
				t.Errorf("%s %q appears twice", what, n)
			}
			set[n] = true
		}
		return set
	}
	var nodeNames, seatNames, modNames []string
	for _, n := range m.Nodes {
		nodeNames = append(nodeNames, n.Name)
		if slices.Contains(model.ReservedNodeNames, n.Name) {
			t.Errorf("node %q has a reserved name", n.Name)
		}
	}
	seatEvents := map[string][]string{}
	seatAccepts := map[string][]string{}
	seatTools := map[string][]string{}
	for _, s := range m.Seats {
		seatNames = append(seatNames, s.Name)
		seatEvents[s.Name], seatAccepts[s.Name], seatTools[s.Name] = s.Emits, s.Accepts, s.Serves
	}
	modEvents := map[string][]string{}
	modTools := map[string][]string{}
	for _, mod := range m.Modules {
		modNames = append(modNames, mod.Name)
		modEvents[mod.Name], modTools[mod.Name] = mod.Emits, mod.Serves
	}
	nodes := names("node", nodeNames)
	seats := names("seat", seatNames)
	names("module", modNames)

	checkFollows := func(who string, refs []model.EventRef) {
		for _, r := range refs {
			emits := modEvents[r.Owner]
			if r.Seat {
				emits = seatEvents[r.Owner]
			}
			if !slices.Contains(emits, r.Event) {
				t.Errorf("%s follows %s, which nobody emits", who, r)
			}
		}
	}
	checkSends := func(who string, refs []model.AcceptRef) {
		for _, r := range refs {
			if !slices.Contains(seatAccepts[r.Seat], r.Accept) {
				t.Errorf("%s sends %s, which no seat accepts", who, r)
			}
		}
	}
	checkCalls := func(who string, refs []model.ToolRef) {
		for _, r := range refs {
			serves := modTools[r.Owner]
			if r.Seat {
				serves = seatTools[r.Owner]
			}
			if !slices.Contains(serves, r.Tool) {
				t.Errorf("%s calls %s, which nobody serves", who, r)
			}
		}
	}
	checkFollows("the controller", m.Controller.Follows)
	checkSends("the controller", m.Controller.Sends)
	checkCalls("the controller", m.Controller.Calls)
	claims := map[model.Instance][]string{}
	for _, mod := range m.Modules {
		who := "module " + mod.Name
		if len(mod.On) == 0 {
			t.Errorf("%s runs on no node", who)
		}
		for _, n := range mod.On {
			if !nodes[n] {
				t.Errorf("%s runs on undeclared node %q", who, n)
			}
			claims[model.Instance{Node: n, Module: mod.Name}] = mod.Claims
		}
		for _, s := range mod.Claims {
			if !seats[s] {
				t.Errorf("%s claims undeclared seat %q", who, s)
			}
		}
		checkFollows(who, mod.Follows)
		checkSends(who, mod.Sends)
		checkCalls(who, mod.Calls)
	}
	held := map[string]bool{}
	for _, h := range m.Holding {
		if held[h.Seat] {
			t.Errorf("seat %q has two holders", h.Seat)
		}
		held[h.Seat] = true
		if !slices.Contains(claims[h.Holder], h.Seat) {
			t.Errorf("seat %q is held by %s, which is not an instance claiming it", h.Seat, h.Holder)
		}
	}
	for inst, seats := range claims {
		for _, s := range seats {
			if !held[s] {
				t.Errorf("seat %q is claimed by %s but has no holder", s, inst)
			}
		}
	}
}
