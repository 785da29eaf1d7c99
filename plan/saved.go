package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/meshbus/meshctl/model"
)

// SavedSchema names the format of a saved plan (`meshctl diff --out`); a change to it that a
// reader of the previous one would misread takes a new version.
const SavedSchema = "meshctl.saved-plan/v1"

// Saved is a plan as reviewed, to be applied exactly (`meshctl apply --plan`): the plan, the
// description it was made from, and what it was made against. It holds no password and no
// hash: the accounts config it would write is named by digest, and an apply renders it again
// from the store's credentials, which must give the same digest.
type Saved struct {
	Schema  string    `json:"schema"`
	Created time.Time `json:"created"`
	// Mesh is the identity of the store the plan was made with (Target.Mesh): a plan applies
	// only to the bus that store manages.
	Mesh string `json:"mesh"`
	// Commit is the description's git commit when it was planned, "" outside a repository.
	Commit string `json:"commit,omitempty"`
	// Description is every file of the description, as read: an apply plans from these, not
	// from the tree, which may have moved on since the review.
	Description []SavedFile `json:"description"`
	// Accounts is the digest of the accounts config the target renders with the store's
	// credentials at planning time (Target.RenderingDigest).
	Accounts string `json:"accounts_rendering"`
	// Plan is the plan as `-o json` writes it (schema meshctl.plan/v1).
	Plan json.RawMessage `json:"plan"`
}

// SavedFile is one file of a saved description.
type SavedFile struct {
	Name string `json:"name"`
	Data string `json:"data"`
}

// Save is p, made for t from the description files, as a saved plan.
func Save(p *Plan, t Target, files []model.File, commit string) (*Saved, error) {
	var doc bytes.Buffer
	if err := p.JSON(&doc); err != nil {
		return nil, err
	}
	s := &Saved{Schema: SavedSchema, Created: time.Now().UTC(), Mesh: t.Mesh, Commit: commit,
		Accounts: t.RenderingDigest(), Plan: json.RawMessage(bytes.TrimSpace(doc.Bytes()))}
	for _, f := range files {
		s.Description = append(s.Description, SavedFile{Name: f.Name, Data: string(f.Data)})
	}
	return s, nil
}

// Write writes s as indented JSON.
func (s *Saved) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// ReadSaved reads a saved plan, refusing another format or version by name.
func ReadSaved(r io.Reader) (*Saved, error) {
	var s Saved
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("reading the saved plan: %w", err)
	}
	if s.Schema != SavedSchema {
		return nil, fmt.Errorf("reading the saved plan: its schema is %q, not %q: make it again with this meshctl's `diff --out`", s.Schema, SavedSchema)
	}
	if len(s.Description) == 0 || len(s.Plan) == 0 {
		return nil, errors.New("reading the saved plan: it holds no description or no plan")
	}
	return &s, nil
}

// Files is the saved description, for model.Parse.
func (s *Saved) Files() []model.File {
	files := make([]model.File, len(s.Description))
	for i, f := range s.Description {
		files[i] = model.File{Name: f.Name, Data: []byte(f.Data)}
	}
	return files
}

// ErrStale is returned (wrapped) when the bus no longer is what a saved plan was made
// against: applying it would not be applying what was reviewed.
var ErrStale = errors.New("the bus has changed since the plan was made")

// Matches reports whether p, planned now for t from the saved description, is the saved
// plan: the same changes, each the same, for the same store, with the accounts config
// rendering to the same digest. What at-stake counts and refusals say may differ (messages
// keep arriving, and an apply may be given leave to lose them): they are the apply's to check
// again as it runs. Otherwise the error wraps ErrStale and names what differs.
func (s *Saved) Matches(p *Plan, t Target) error {
	if s.Mesh != t.Mesh {
		return fmt.Errorf("%w: it was made for the mesh of store %q, and this store is %q", ErrStale, s.Mesh, t.Mesh)
	}
	var now bytes.Buffer
	if err := p.JSON(&now); err != nil {
		return err
	}
	saved, err := reviewable(s.Plan)
	if err != nil {
		return fmt.Errorf("reading the saved plan: %w", err)
	}
	current, err := reviewable(now.Bytes())
	if err != nil {
		return err
	}
	if diff := differences(saved, current); len(diff) > 0 {
		return fmt.Errorf("%w: %s", ErrStale, strings.Join(diff, "; "))
	}
	if got := t.RenderingDigest(); got != s.Accounts {
		return fmt.Errorf("%w: the accounts config it would write is not the one planned (a credential was issued, rotated or revoked since)", ErrStale)
	}
	return nil
}

// reviewable is a plan document as generic JSON, keyed by change, without what may move
// between planning and applying.
func reviewable(doc []byte) (map[string]any, error) {
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	out := map[string]any{}
	changes, _ := d["changes"].([]any)
	for _, c := range changes {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		delete(m, "at_stake")
		delete(m, "refused")
		delete(m, "risk") // graded from what is at stake
		out[changeID(m)] = m
	}
	if h, ok := d["holders"]; ok {
		out["seat holders"] = h
	}
	return out, nil
}

func changeID(m map[string]any) string {
	kind, _ := m["kind"].(string)
	name, _ := m["name"].(string)
	if stream, _ := m["stream"].(string); stream != "" {
		name = stream + "/" + name
	}
	return kind + " " + name
}

// differences names, in order, what only one of two plans has and what both have otherwise.
func differences(saved, current map[string]any) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(saved)) {
		c, ok := current[id]
		switch {
		case !ok:
			out = append(out, id+" is no longer to change")
		case !reflect.DeepEqual(saved[id], c):
			out = append(out, id+" would now change otherwise")
		}
	}
	for _, id := range slices.Sorted(maps.Keys(current)) {
		if _, ok := saved[id]; !ok {
			out = append(out, id+" would now change too")
		}
	}
	return out
}
