// Package explaintest checks explain's advice the way an operator takes it: the declarations
// the advice's text names are written into a copy of the description's YAML, the copy is loaded
// as any description is (model.Parse) and derived (render.Derive), and what it derives must
// grant what was refused. It reads the text, not explain's own reckoning, so advice that reads
// wrong fails even where explain believed it right.
package explaintest

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/explain"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// The declarations explain's advice writes: a module's, a seat's or the controller's list, as
// what one does not declare ("module shop does not declare calls: [telegram/status]") or,
// where several are needed, each in backquotes after its owner; a holder; the bus's kind of
// consumer; and the follow an idle module is given as an example.
var (
	keyed    = regexp.MustCompile("(?:(module|seat) ([a-z][a-z0-9-]*)|(the controller)) (?:does not declare |would need )?`?(follows|calls|sends|emits|serves|accepts|claims): \\[([^\\]]*)\\]")
	anyKeyed = regexp.MustCompile(`\b(?:follows|calls|sends|emits|serves|accepts|claims): \[`)
	holder   = regexp.MustCompile(`holders: \[\{seat: ([^,]+), node: ([^,]+), module: ([^}]+)\}\]` + "`?" + `( in place of \{[^}]*\})?`)
	consumer = regexp.MustCompile(`bus: \{consumers: (pull|push)\}`)
	example  = regexp.MustCompile(`^module ([a-z][a-z0-9-]*) follows nothing.*, e\.g\. follows: \[([^\]]+)\]$`)
)

// ErrNothingAdvised is returned for advice that names no declaration.
var ErrNothingAdvised = errors.New("the advice names no declaration")

// Apply writes the declarations advice names into a copy of files and loads the copy.
func Apply(files []model.File, advice string) (*model.Mesh, error) {
	docs := make([]*yaml.Node, len(files))
	for i, f := range files {
		var doc yaml.Node
		if err := yaml.Unmarshal(f.Data, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		if len(doc.Content) == 0 {
			doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
		}
		docs[i] = &doc
	}
	if len(docs) == 0 {
		return nil, errors.New("no description to apply the advice to")
	}
	ed := editor{docs: docs}
	n := 0
	if m := example.FindStringSubmatch(advice); m != nil {
		ed.appendTo(ed.item("modules", m[1]), "follows", m[2])
		n++
	} else {
		found := keyed.FindAllStringSubmatch(advice, -1)
		if len(found) != len(anyKeyed.FindAllString(advice, -1)) {
			return nil, fmt.Errorf("the advice names a declaration without saying whose: %q", advice)
		}
		for _, k := range found {
			var owner *yaml.Node
			switch k[1] {
			case "module":
				owner = ed.item("modules", k[2])
			case "seat":
				owner = ed.item("seats", k[2])
			default:
				owner = ed.section("controller", yaml.MappingNode)
			}
			if owner == nil {
				return nil, fmt.Errorf("the advice names %s %s, which the description does not declare", k[1], k[2])
			}
			ed.appendTo(owner, k[4], k[5])
			n++
		}
	}
	for _, h := range holder.FindAllStringSubmatch(advice, -1) {
		list := ed.section("holders", yaml.SequenceNode)
		if h[4] != "" {
			list.Content = slices.DeleteFunc(list.Content, func(item *yaml.Node) bool { return value(item, "seat") == h[1] })
		}
		list.Content = append(list.Content, mapping("seat", h[1], "node", h[2], "module", h[3]))
		n++
	}
	for _, c := range consumer.FindAllStringSubmatch(advice, -1) {
		b := ed.section("bus", yaml.MappingNode)
		if v := field(b, "consumers"); v != nil {
			v.Value = c[1]
		} else {
			b.Content = append(b.Content, scalar("consumers"), scalar(c[1]))
		}
		n++
	}
	if n == 0 {
		return nil, ErrNothingAdvised
	}
	out := make([]model.File, len(files))
	for i, d := range docs {
		data, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		out[i] = model.File{Name: files[i].Name, Data: data}
	}
	return model.Parse(out)
}

// Check applies advice to a copy of files and reports why it is no advice for r: the copy
// does not load, or what it derives does not grant r.
func Check(files []model.File, r busclient.PermissionError, advice string) error {
	m, err := Apply(files, advice)
	if err != nil {
		return fmt.Errorf("applying %q: %w", advice, err)
	}
	if !explain.Granted(render.Derive(m), r) {
		return fmt.Errorf("the description with %q applied does not let %s %s %s", advice, r.User, r.Op, r.Subject)
	}
	return nil
}

// editor changes the description's documents in place.
type editor struct{ docs []*yaml.Node }

func top(doc *yaml.Node) *yaml.Node { return doc.Content[0] }

// item is the entry of a top-level list (modules, seats) of that name, or nil.
func (ed editor) item(list, name string) *yaml.Node {
	for _, d := range ed.docs {
		seq := field(top(d), list)
		if seq == nil {
			continue
		}
		for _, item := range seq.Content {
			if value(item, "name") == name {
				return item
			}
		}
	}
	return nil
}

// section is the top-level section of that key, added to the first file when none has it.
func (ed editor) section(key string, kind yaml.Kind) *yaml.Node {
	for _, d := range ed.docs {
		if v := field(top(d), key); v != nil {
			if v.Kind != kind { // `holders:` with nothing under it
				*v = yaml.Node{Kind: kind}
			}
			return v
		}
	}
	v := &yaml.Node{Kind: kind}
	m := top(ed.docs[0])
	m.Content = append(m.Content, scalar(key), v)
	return v
}

// appendTo adds value to the list under key of a mapping, making the list if need be.
func (ed editor) appendTo(m *yaml.Node, key, val string) {
	list := field(m, key)
	if list == nil {
		list = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		m.Content = append(m.Content, scalar(key), list)
	}
	list.Content = append(list.Content, scalar(strings.TrimSpace(val)))
}

func field(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func value(m *yaml.Node, key string) string {
	if v := field(m, key); v != nil {
		return v.Value
	}
	return ""
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

func mapping(kv ...string) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	for _, s := range kv {
		m.Content = append(m.Content, scalar(s))
	}
	return m
}
