package model

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/meshbus/meshctl/internal/printable"
)

// Load reads every *.yaml and *.yml file under dir (recursively, in lexical order, skipping
// hidden directories such as .git) and returns the validated mesh. A description problem
// is a *LoadError listing every diagnostic; a directory that cannot be read is an ordinary
// error.
func Load(dir string) (*Mesh, error) { return LoadContext(context.Background(), dir) }

// LoadContext is Load, stopping with ctx.Err() soon after ctx ends: it checks between files
// and throughout validation, so an interrupted command does not finish checking a large
// description first.
func LoadContext(ctx context.Context, dir string) (*Mesh, error) {
	files, refused, err := readDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	m, err := parse(ctx, files, refused)
	if err != nil {
		return nil, err
	}
	if m.Bus.Operator != nil {
		root, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		m.Bus.Operator.rooted(root)
	}
	return m, nil
}

// IsDescriptionFile reports whether a file of this name is part of a description. Editors'
// temporary and backup files (".foo.yaml.swp", "foo.yaml~") are not.
func IsDescriptionFile(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	ext := filepath.Ext(name)
	return ext == ".yaml" || ext == ".yml"
}

// Parse validates a description given as files, in the order given.
func Parse(files []File) (*Mesh, error) { return parse(context.Background(), files, nil) }

// parse validates files, reporting the entries the directory walk refused with the rest.
func parse(ctx context.Context, files []File, diags diagnostics) (*Mesh, error) {
	var raw rawMesh
	if len(files) == 0 && len(diags) == 0 {
		// About the directory itself, which has no line: "." is the directory loaded.
		diags.add(Pos{File: "."}, "no mesh description here: no *.yaml or *.yml file in this directory or below it (hidden directories and editors' backup files are skipped)")
	}
	if len(files) > 0 {
		raw.firstFile = files[0].Name
	}
	ahead := parseAhead(ctx, files)
	for i, f := range files {
		yamlDocs, err := ahead.take(ctx, i)
		if err != nil {
			return nil, err
		}
		if len(f.Data) > MaxFileSize {
			diags.add(Pos{File: f.Name}, "%s", tooLarge(int64(len(f.Data))))
			continue
		}
		d := decoder{file: f.Name, diags: &diags}
		d.file_(f.Data, yamlDocs, &raw)
	}
	mesh, err := raw.validate(ctx, &diags)
	if err != nil {
		return nil, err
	}
	if err := diags.err(ctx); err != nil {
		return nil, err
	}
	return mesh, nil
}

// decoder turns yaml.v3 nodes of one file into raw declarations, recording problems with
// their positions instead of stopping at the first.
type decoder struct {
	file  string
	diags *diagnostics
}

func (d *decoder) pos(n *yaml.Node) Pos { return Pos{File: d.file, Line: n.Line, Col: n.Column} }

func (d *decoder) errorf(n *yaml.Node, format string, args ...any) {
	d.diags.add(d.pos(n), format, args...)
}

func (d *decoder) file_(data []byte, parsed documents, raw *rawMesh) {
	for _, doc := range parsed.docs {
		d.document(doc, raw)
	}
	if parsed.err != nil {
		d.malformed(data, parsed.err)
	}
}

// documents are a file's YAML documents as yaml.v3 parsed them, each one's root (empty ones
// left out), up to the syntax error that stopped the parse, if any.
type documents struct {
	docs []*yaml.Node
	err  error
}

func parseDocuments(data []byte) documents {
	var out documents
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			out.err = err
			return out
		}
		if len(doc.Content) > 0 {
			out.docs = append(out.docs, doc.Content[0])
		}
	}
}

// aheadParser parses files' YAML a few files ahead of their decoding, on the other cores: the
// parse is most of a load's work, and a large description is dozens of files. The files are
// decoded in their order; at most parseWindow of them are parsed and not yet taken, so a load
// holds the nodes of a few files at a time, as one parsing them one by one would. A file over
// MaxFileSize is not parsed.
type aheadParser struct {
	parsed []chan documents
	window chan struct{}
}

// parseWindow is how many files are parsed ahead of the one being decoded.
const parseWindow = 3

func parseAhead(ctx context.Context, files []File) *aheadParser {
	p := &aheadParser{parsed: make([]chan documents, len(files)), window: make(chan struct{}, parseWindow)}
	for i := range p.parsed {
		p.parsed[i] = make(chan documents, 1)
	}
	go func() {
		for i, f := range files {
			select {
			case p.window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			go func() {
				var docs documents
				if len(f.Data) <= MaxFileSize {
					docs = parseDocuments(f.Data)
				}
				p.parsed[i] <- docs
			}()
		}
	}()
	return p
}

// take waits for the i-th file's documents, or for ctx to end.
func (p *aheadParser) take(ctx context.Context, i int) (documents, error) {
	if err := ctx.Err(); err != nil {
		return documents{}, err
	}
	select {
	case docs := <-p.parsed[i]:
		<-p.window
		return docs, nil
	case <-ctx.Done():
		return documents{}, ctx.Err()
	}
}

// yamlErrorLine digs the line out of a yaml.v3 syntax error, which carries it only in text.
func yamlErrorLine(err error) int {
	var line int
	msg := err.Error()
	if i := strings.Index(msg, "line "); i >= 0 {
		fmt.Sscanf(msg[i:], "line %d", &line)
		// yaml.v3 numbers its parser's errors (not its scanner's) from 0: "line 4" for a
		// flow sequence opened on line 5.
		if line > 0 && slices.ContainsFunc(yamlParserProblems, func(p string) bool { return strings.HasSuffix(msg, p) }) {
			line++
		}
	}
	if line == 0 {
		line = 1
	}
	return line
}

// yamlParserProblems are the messages of yaml.v3's parser errors, whose line is off by one.
var yamlParserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"found undefined tag handle",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found duplicate %TAG directive",
}

func yamlErrorText(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if i := strings.Index(msg, "line "); i == 0 {
		if j := strings.Index(msg, ": "); j > 0 {
			msg = msg[j+2:]
		}
	}
	return msg
}

func (d *decoder) document(n *yaml.Node, raw *rawMesh) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.MappingNode {
		// Not kindName: the file may be something else saved as .yaml (a password, a key),
		// and its content has no place in an error.
		d.errorf(n, "the top level of a mesh file must be a mapping (key: value), not %s", kindWord(n))
		return
	}
	fields := d.section(n, topSection)
	if v, ok := fields["bus"]; ok {
		if raw.bus != nil {
			d.errorf(v.key, "bus is declared twice: first at %s", raw.bus.pos)
		} else {
			raw.bus = d.bus(v.val)
		}
	}
	if v, ok := fields["controller"]; ok {
		if raw.controller != nil {
			d.errorf(v.key, "controller is declared twice: first at %s", raw.controller.pos)
		} else {
			raw.controller = d.controller(v.val)
		}
	}
	if v, ok := fields["nodes"]; ok {
		raw.nodesKey = d.pos(v.key)
		for _, item := range d.seq(v.val, "nodes") {
			f := d.section(item, nodeSection)
			raw.nodes = append(raw.nodes, rawNode{name: d.requiredName(item, f, "node"), pos: d.pos(item)})
		}
	}
	if v, ok := fields["seats"]; ok {
		for _, item := range d.seq(v.val, "seats") {
			raw.seats = append(raw.seats, d.seat(item))
		}
	}
	if v, ok := fields["modules"]; ok {
		for _, item := range d.seq(v.val, "modules") {
			raw.modules = append(raw.modules, d.module(item))
		}
	}
	if v, ok := fields["holders"]; ok {
		for _, item := range d.seq(v.val, "holders") {
			f := d.section(item, holderSection)
			raw.holders = append(raw.holders, rawHolder{
				seat:   d.required(item, f, "seat", "holder"),
				node:   d.required(item, f, "node", "holder"),
				module: d.required(item, f, "module", "holder"),
				pos:    d.pos(item),
			})
		}
	}
	if v, ok := fields["observers"]; ok {
		for _, item := range d.seq(v.val, "observers") {
			f := d.section(item, observerSection)
			raw.observers = append(raw.observers, rawObserver{name: d.requiredName(item, f, "observer"), pos: d.pos(item)})
		}
	}
}

func (d *decoder) bus(n *yaml.Node) *rawBus {
	b := &rawBus{pos: d.pos(n)}
	f := d.section(n, busSection)
	b.url, _ = d.optional(f, "url")
	b.fingerprints = d.scalars(f, "fingerprint", "bus.fingerprint")
	b.caFile, _ = d.optional(f, "ca_file")
	b.certFile, _ = d.optional(f, "cert_file")
	b.keyFile, _ = d.optional(f, "key_file")
	b.accountsFile, _ = d.optional(f, "accounts_file")
	b.listen, _ = d.optional(f, "listen")
	b.eventsMaxAge, _ = d.optional(f, "events_max_age")
	b.consumers, _ = d.optional(f, "consumers")
	b.auth, _ = d.optional(f, "auth")
	if v, ok := f["accounts"]; ok {
		b.accounts = d.enum(v.val, "bus.accounts", key{enum: accountsShapes})
	}
	if v, ok := f["system_user"]; ok {
		b.systemUser = d.systemUser(v.val)
	}
	if v, ok := f["replicas"]; ok {
		if n, ok := d.integer(v.val, "bus.replicas"); ok {
			b.replicas, b.replicasPos = n, d.pos(v.val)
		}
	}
	b.allowPlaintext, b.allowPlaintextPos = d.boolean(f, "allow_plaintext_listen")
	b.allowPlaintextURL, b.allowPlaintextURLPos = d.boolean(f, "allow_plaintext")
	if v, ok := f["reload"]; ok {
		b.reload = d.reload(v.val)
	}
	if v, ok := f["jetstream"]; ok {
		b.jetstream = d.jetstream(v.val)
	}
	if v, ok := f["operator"]; ok {
		b.operator = d.operator(v.val)
	}
	if v, ok := f["servers"]; ok {
		b.serversPos = d.pos(v.val)
		for _, item := range d.seq(v.val, "bus.servers") {
			b.servers = append(b.servers, d.server(item))
		}
	}
	return b
}

// boolean reads the bus's key, true or false, and where it stands; the zero Pos when it is
// absent or not a boolean (said).
func (d *decoder) boolean(f map[string]field, key string) (bool, Pos) {
	v, ok := f[key]
	if !ok {
		return false, Pos{}
	}
	var b bool
	if v.val.Kind != yaml.ScalarNode || v.val.Tag != "!!bool" || v.val.Decode(&b) != nil {
		d.errorf(v.val, "bus.%s must be true or false, not %s", key, kindName(v.val))
		return false, Pos{}
	}
	return b, d.pos(v.val)
}

func (d *decoder) reload(n *yaml.Node) *rawReload {
	r := &rawReload{pos: d.pos(n)}
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "none":
			r.manual = true
		case "system":
			r.system = true
		default:
			d.errorf(n, `bus.reload must be "none", "system", {pid_file: PATH} or {command: [ARGV...]}, not %s`, printable.Quote(n.Value))
			r.manual = true
		}
		return r
	}
	f := d.section(n, reloadSection)
	r.pidFile, _ = d.optional(f, "pid_file")
	if v, ok := f["command"]; ok {
		r.command = d.strings(v.val, "bus.reload.command")
		if len(r.command) == 0 {
			d.errorf(v.val, "bus.reload.command must name a program to run")
		}
	}
	if r.pidFile.val != "" && len(r.command) > 0 {
		d.errorf(n, "bus.reload takes either pid_file or command, not both")
	}
	if r.pidFile.val == "" && len(r.command) == 0 {
		d.errorf(n, `bus.reload needs pid_file or command (or write reload: none, or reload: system)`)
	}
	return r
}

func (d *decoder) controller(n *yaml.Node) *rawController {
	c := &rawController{pos: d.pos(n)}
	f := d.section(n, controllerSection)
	c.follows = d.names(f, "follows", "controller.follows")
	c.sends = d.names(f, "sends", "controller.sends")
	c.calls = d.names(f, "calls", "controller.calls")
	return c
}

func (d *decoder) seat(n *yaml.Node) rawSeat {
	f := d.section(n, seatSection)
	s := rawSeat{name: d.requiredName(n, f, "seat"), pos: d.pos(n)}
	s.scope, _ = d.optional(f, "scope")
	s.accepts = d.names(f, "accepts", "seat.accepts")
	s.emits = d.names(f, "emits", "seat.emits")
	s.serves = d.names(f, "serves", "seat.serves")
	s.formerly = d.names(f, "formerly", "seat.formerly")
	if v, ok := f["stream"]; ok {
		s.stream = d.streamDecl(v.val, "seat.stream")
	}
	if v, ok := f["consumer"]; ok {
		s.consumer = d.consumerDecl(v.val, "seat.consumer")
	}
	return s
}

func (d *decoder) module(n *yaml.Node) rawModule {
	f := d.section(n, moduleSection)
	m := rawModule{name: d.requiredName(n, f, "module"), pos: d.pos(n)}
	m.on = d.names(f, "on", "module.on")
	if v, ok := f["on"]; !ok {
		d.errorf(n, "module %s has no `on`: list the nodes it runs on", printable.Quote(m.name.val))
	} else if v.val.Tag == "!!null" || (v.val.Kind == yaml.SequenceNode && len(v.val.Content) == 0) {
		d.errorf(v.val, "module %s runs on no node: list at least one in `on`", printable.Quote(m.name.val))
	}
	m.claims = d.names(f, "claims", "module.claims")
	m.emits = d.names(f, "emits", "module.emits")
	m.serves = d.names(f, "serves", "module.serves")
	m.follows = d.names(f, "follows", "module.follows")
	m.sends = d.names(f, "sends", "module.sends")
	m.calls = d.names(f, "calls", "module.calls")
	if v, ok := f["consumer"]; ok {
		m.consumer = d.consumerDecl(v.val, "module.consumer")
	}
	return m
}

// section reads a mapping of one section of the description, whose keys are the ones its table
// in schema.go lists: the same table the schema is written from.
func (d *decoder) section(n *yaml.Node, s *section) map[string]field {
	return d.fields(n, s.what, s.names)
}

// field is a mapping entry with both nodes, so errors can point at the key or the value.
type field struct{ key, val *yaml.Node }

// fields reads a mapping, reporting unknown and repeated keys. A value of the wrong kind
// yields no fields and one error.
func (d *decoder) fields(n *yaml.Node, what string, allowed []string) map[string]field {
	out := map[string]field{}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping (key: value), not %s", what, kindName(n))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, "%s: keys must be plain words", what)
			continue
		}
		if !contains(allowed, k.Value) {
			d.diags.addUnknown(d.pos(k), k.Value, func() []string { return allowed },
				fmt.Sprintf("unknown key %s in %s", printable.Quote(k.Value), what), "; expected one of: "+strings.Join(allowed, ", "))
			continue
		}
		if prev, dup := out[k.Value]; dup {
			d.errorf(k, "key %s appears twice in %s: first at %s", printable.Quote(k.Value), what, d.pos(prev.key))
			continue
		}
		out[k.Value] = field{key: k, val: v}
	}
	return out
}

func (d *decoder) seq(n *yaml.Node, what string) []*yaml.Node {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "%s must be a list, not %s", what, kindName(n))
		return nil
	}
	return n.Content
}

// scalar reads a string-like scalar. Numbers are accepted as their text (an event may be
// named "404"); booleans and nulls are refused, since `yes` meant as a name is a typo
// waiting to happen.
func (d *decoder) scalar(n *yaml.Node, what string) (name, bool) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, "%s must be a string, not %s", what, kindName(n))
		return name{}, false
	}
	switch n.Tag {
	case "!!str", "!!int":
	default:
		d.errorf(n, "%s must be a string, not %s", what, kindName(n))
		return name{}, false
	}
	return name{val: n.Value, pos: d.pos(n)}, true
}

func (d *decoder) optional(f map[string]field, key string) (name, bool) {
	v, ok := f[key]
	if !ok {
		return name{}, false
	}
	return d.scalar(v.val, key)
}

func (d *decoder) required(n *yaml.Node, f map[string]field, key, what string) name {
	if _, ok := f[key]; !ok {
		if n.Kind == yaml.MappingNode {
			d.errorf(n, "%s needs a %s", what, key)
		}
		return name{} // no position: already reported, unlike an empty string
	}
	v, _ := d.optional(f, key)
	return v
}

func (d *decoder) requiredName(n *yaml.Node, f map[string]field, what string) name {
	return d.required(n, f, "name", what)
}

func (d *decoder) names(f map[string]field, key, what string) []name {
	v, ok := f[key]
	if !ok {
		return nil
	}
	var out []name
	for _, item := range d.seq(v.val, what) {
		if s, ok := d.scalar(item, what+" entry"); ok {
			out = append(out, s)
		}
	}
	return out
}

// scalars reads a key that takes one string-like scalar or a list of them, as a
// fingerprint does: one certificate pinned, or several.
func (d *decoder) scalars(f map[string]field, key, what string) []name {
	v, ok := f[key]
	if !ok {
		return nil
	}
	switch v.val.Kind {
	case yaml.SequenceNode:
		var out []name
		for _, item := range v.val.Content {
			if s, ok := d.scalar(item, what+" entry"); ok {
				out = append(out, s)
			}
		}
		return out
	case yaml.ScalarNode:
		if s, ok := d.scalar(v.val, what); ok {
			return []name{s}
		}
		return nil
	}
	d.errorf(v.val, "%s must be a string or a list of strings, not %s", what, kindName(v.val))
	return nil
}

func (d *decoder) strings(n *yaml.Node, what string) []string {
	var out []string
	for _, item := range d.seq(n, what) {
		if s, ok := d.scalar(item, what+" entry"); ok {
			out = append(out, s.val)
		}
	}
	return out
}

func (d *decoder) integer(n *yaml.Node, what string) (int, bool) {
	var v int
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		d.errorf(n, "%s must be a whole number, not %s", what, kindName(n))
		return 0, false
	}
	return v, true
}

// kindWord names what a node is without its value.
func kindWord(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		switch n.Tag {
		case "!!null":
			return "empty"
		case "!!bool":
			return "a boolean"
		case "!!int", "!!float":
			return "a number"
		}
		return "a string"
	}
	return kindName(n)
}

// kindName names what a node is, quoting a scalar's value.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "empty"
		case "!!bool":
			return "the boolean " + plainText(n.Value)
		case "!!int", "!!float":
			return "the number " + plainText(n.Value)
		}
		return printable.Quote(n.Value)
	}
	return "something else"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
