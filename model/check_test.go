package model_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshbus/meshctl/model"
)

// A loaded description checked again in memory is the same mesh: Check applies Load's rules
// to what Load made, and makes nothing else of it.
func TestCheckGivesBackWhatLoadMade(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{"../examples/seed", "../examples/quickstart"}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "valid-") {
			dirs = append(dirs, filepath.Join("testdata", e.Name()))
		}
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			m, err := model.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			got, err := model.Check(m)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(m, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Check(Load(%s)) differs (-loaded +checked):\n%s", dir, diff)
			}
		})
	}
}

// A description changed in memory is refused as its YAML would be, and resolved as its YAML
// would be: a call to a tool nobody serves is an error, a holder named takes the seat.
func TestCheckValidatesWhatChangedInMemory(t *testing.T) {
	t.Parallel()
	m, err := model.Load("../examples/seed")
	if err != nil {
		t.Fatal(err)
	}
	shop := func(c *model.Mesh) *model.Module {
		for i := range c.Modules {
			if c.Modules[i].Name == "shop" {
				return &c.Modules[i]
			}
		}
		t.Fatal("no module shop")
		return nil
	}

	bad := *m
	bad.Modules = append([]model.Module{}, m.Modules...)
	s := shop(&bad)
	s.Calls = append(slices.Clip(s.Calls), model.ToolRef{Owner: "audit", Tool: "status"})
	_, err = model.Check(&bad)
	var invalid *model.LoadError
	if !errors.As(err, &invalid) || !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), `module "audit" does not serve "status"`) {
		t.Errorf("Check of a call to a tool nobody serves: %v", err)
	}

	moved := *m
	moved.Modules = append([]model.Module{}, m.Modules...)
	shop(&moved).Claims = []string{"telegram-sender"}
	moved.Holders = []model.HolderDecl{{Seat: "telegram-sender", Node: "two", Module: "shop"}}
	got, err := model.Check(&moved)
	if err != nil {
		t.Fatal(err)
	}
	want := model.Holding{Seat: "telegram-sender", Holder: model.Instance{Node: "two", Module: "shop"}, Explicit: true}
	if !slices.Contains(got.Holding, want) {
		t.Errorf("holding after the handover: %+v, want %+v among them", got.Holding, want)
	}
	if slices.Contains(m.Holding, want) {
		t.Errorf("the handover changed the description it was copied from")
	}

	noKind := *m
	noKind.Bus.Consumers = "sometimes"
	if _, err := model.Check(&noKind); err == nil || !strings.Contains(err.Error(), "bus.consumers must be pull or push") {
		t.Errorf("Check of an unknown kind of consumer: %v", err)
	}
}

// Check keeps the settings the description gave its seats and modules, and gives one added in
// memory the mesh's: they are not in the declarations Check validates again.
func TestCheckKeepsTheSettings(t *testing.T) {
	t.Parallel()
	m, err := model.Load("testdata/valid-jetstream-settings")
	if err != nil {
		t.Fatal(err)
	}
	added := *m
	added.Modules = append(slices.Clip(m.Modules), model.Module{Name: "ledger", On: []string{"one"}, Pos: m.Modules[0].Pos})
	got, err := model.Check(&added)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range m.Seats {
		if !reflect.DeepEqual(got.Seats[i].Stream, s.Stream) || !reflect.DeepEqual(got.Seats[i].Consumer, s.Consumer) {
			t.Errorf("seat %s: %+v %+v, want %+v %+v", s.Name, got.Seats[i].Stream, got.Seats[i].Consumer, s.Stream, s.Consumer)
		}
	}
	for i, mod := range m.Modules {
		if !reflect.DeepEqual(got.Modules[i].Consumer, mod.Consumer) {
			t.Errorf("module %s: %+v, want %+v", mod.Name, got.Modules[i].Consumer, mod.Consumer)
		}
	}
	if c := got.Modules[len(got.Modules)-1].Consumer; !reflect.DeepEqual(c, m.Bus.ConsumerDefaults) {
		t.Errorf("a module added in memory: %+v, want the mesh's %+v", c, m.Bus.ConsumerDefaults)
	}
}
