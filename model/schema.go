package model

import (
	"encoding/json"
	"maps"
)

// The keys a description may hold, section by section, with the shape of each value. The
// loader's unknown-key check reads its allowed keys from these tables and Schema writes the JSON
// Schema from them, so an editor's schema and the loader cannot disagree on which keys exist or
// what kind of value each takes. The loader still checks everything a schema cannot say (names'
// rules, references, listen addresses); the schema is what an editor can check while typing.

// valueKind is the shape of a key's value, as the loader's decoder reads it.
type valueKind int

const (
	// scalarValue is a string-like scalar: a string, or a whole number taken as its text (an
	// event may be named "404"). Booleans and nulls are refused.
	scalarValue valueKind = iota
	// namesValue is a list of string-like scalars, or nothing (a key left empty).
	namesValue
	// scalarsValue is one string-like scalar, or a list of them: a certificate's fingerprint,
	// or several.
	scalarsValue
	// integerValue is a whole number.
	integerValue
	// boolValue is true or false.
	boolValue
	// sectionValue is a mapping of its own section's keys.
	sectionValue
	// listValue is a list of mappings of its own section's keys, or nothing.
	listValue
	// reloadValue is bus.reload: the word none or system, or a mapping of its section's keys.
	reloadValue
	// sizeValue is a size: a whole number of bytes, or a whole number and a unit (64MiB),
	// within the key's range; the word unlimited where the key allows it.
	sizeValue
	// durationValue is a Go duration (30s, 72h) of at least the key's min; the word unlimited
	// where the key allows it.
	durationValue
	// countValue is a whole number within the key's range, or the word unlimited where the
	// key allows it.
	countValue
	// enumValue is one of the key's words.
	enumValue
	// durationsValue is a list of Go durations, each of at least the key's min.
	durationsValue
)

// key is one key of a section.
type key struct {
	name     string
	kind     valueKind
	section  *section // for sectionValue, listValue and reloadValue
	required bool
	doc      string
	// min and max bound an integerValue, sizeValue or countValue (min alone a durationValue's
	// and durationsValue's, in nanoseconds); unlimited admits the word unlimited; enum lists an
	// enumValue's words.
	min, max  int64
	unlimited bool
	enum      []string
}

// section is one mapping of a description: the top level of a file, bus, a seat, and so on.
type section struct {
	what  string // how the loader's errors name it: "bus", "a seat"
	keys  []key
	names []string // the keys' names in the order declared, as the loader lists them
}

func newSection(what string, keys []key) *section {
	s := &section{what: what, keys: keys}
	for _, k := range keys {
		s.names = append(s.names, k.name)
	}
	return s
}

var (
	streamSettingsSection   = newSection("stream settings", streamSettingsKeys)
	consumerSettingsSection = newSection("consumer settings", consumerSettingsKeys)
	streamsSection          = newSection("bus.jetstream.streams", []key{
		{name: "control", kind: sectionValue, section: streamSettingsSection, doc: "CONTROL: nodes' reports and enrolment requests until the controller takes them. 64MiB by default."},
		{name: "events", kind: sectionValue, section: streamSettingsSection, doc: "EVENTS: module and seat events. 1GiB and 168h by default."},
		{name: "nodes", kind: sectionValue, section: streamSettingsSection, doc: "NODES: the latest declaration to each node. 256MiB by default."},
		{name: "seats", kind: sectionValue, section: streamSettingsSection, doc: "Every seat's work queue, unless the seat's own stream says otherwise. 64MiB, discard new, by default."},
	})
	jetstreamSection = newSection("bus.jetstream", []key{
		{name: "streams", kind: sectionValue, section: streamsSection, doc: "The settings of each stream of the mesh."},
		{name: "consumers", kind: sectionValue, section: consumerSettingsSection, doc: "The settings of every module's and seat worker's consumer, unless the module's or seat's own consumer says otherwise."},
	})
	reloadSection = newSection("bus.reload", []key{
		{name: "pid_file", kind: scalarValue, doc: "Send SIGHUP to the process whose pid this file holds."},
		{name: "command", kind: namesValue, doc: "Run this command (program and arguments) to reload the server."},
	})
	serverSection = newSection("a server", []key{
		{name: "url", kind: scalarValue, required: true, doc: "This server's URL (nats:// or tls://), without user or password."},
		{name: "accounts_file", kind: scalarValue, doc: "The accounts config this server includes: where meshctl writes it, or with copy, the local file copy puts in place. Required unless bus.auth is jwt."},
		{name: "reload", kind: reloadValue, section: reloadSection, doc: `How this server is told to re-read its accounts config: none, system (a request as meshctl's system user, or as bus.system_user under accounts: account), {pid_file: PATH} or {command: [ARGV...]}.`},
		{name: "copy", kind: namesValue, doc: "A command (program and arguments, no shell) that puts the accounts config onto a server off the control host; the argument {file} is replaced by the local file's path."},
		{name: "fingerprint", kind: scalarsValue, doc: "Hex SHA-256 of this server's leaf certificate, where it differs from bus.fingerprint; a list for a planned rotation (the certificate served now and its successor)."},
		{name: "ca_file", kind: scalarValue, doc: "PEM file of the CA that signs this server's certificate, where it differs from bus.ca_file."},
	})
	systemUserSection = newSection("bus.system_user", []key{
		{name: "user", kind: scalarValue, doc: "The user's name in the server's system account, with password_file."},
		{name: "password_file", kind: scalarValue, doc: "The file holding the user's password (read at each reload, never printed)."},
		{name: "seed_file", kind: scalarValue, doc: "Instead of user and password_file: the file holding an nkey user's seed (SU...)."},
	})
	busSection = newSection("bus", []key{
		{name: "url", kind: scalarValue, doc: "An external server's URL (nats:// or tls://), without user or password. Without it meshctl runs an embedded bus."},
		{name: "fingerprint", kind: scalarsValue, doc: "Hex SHA-256 of the external server's leaf certificate, pinned by every client; a list for a planned rotation (the certificate served now and its successor)."},
		{name: "ca_file", kind: scalarValue, doc: "PEM file of the CA that signs the external servers' certificates: every client verifies the server by it and by the server's name, so a renewed certificate needs no change. Every membership carries its text."},
		{name: "cert_file", kind: scalarValue, doc: "Absolute path of the client certificate presented where the servers ask for one (verify: true): meshctl's own on the control host, and every membership names the same path for its host's own."},
		{name: "key_file", kind: scalarValue, doc: "Absolute path of cert_file's private key, on the control host and, as every membership names it, on each host."},
		{name: "accounts_file", kind: scalarValue, doc: "Where meshctl writes the accounts config an external server includes."},
		{name: "listen", kind: scalarValue, doc: "The embedded bus's listen address, host:port (loopback unless allow_plaintext_listen)."},
		{name: "allow_plaintext_listen", kind: boolValue, doc: "The operator's word that the network the embedded bus listens on is trusted."},
		{name: "allow_plaintext", kind: boolValue, doc: "The operator's word that the network to an external server is trusted: a nats:// URL off this host without a fingerprint is refused without it."},
		{name: "replicas", kind: integerValue, min: 1, max: maxReplicas, doc: "Replicas of every stream, 1 to 5, unless its own settings say otherwise."},
		{name: "reload", kind: reloadValue, section: reloadSection, doc: `How an external server is told to re-read its accounts config: none, system (a request as meshctl's system user, or as bus.system_user under accounts: account), {pid_file: PATH} or {command: [ARGV...]}.`},
		{name: "events_max_age", kind: scalarValue, doc: "How long EVENTS keeps an event, as a Go duration (168h, 7 days, by default): the older spelling of jetstream.streams.events.max_age."},
		{name: "consumers", kind: scalarValue, doc: "How hosts take deliveries: pull (the default; they ask for messages) or push (the server sends them to a deliver subject)."},
		{name: "auth", kind: scalarValue, doc: "How hosts (nodes, enrolment identities, module instances) log in: password (the default) or nkey (a seed in the membership, only its public key in the accounts config) or jwt (servers in operator mode: the mesh is one account, each host a user of it holding creds, see bus.operator). Changing it needs every host's membership issued anew."},
		{name: "accounts", kind: enumValue, enum: accountsShapes, doc: "How much of the servers' accounts config meshctl writes: block (the default), the whole accounts block, which the server's config includes at its top level; or account, the MESH account alone, which the server's own accounts block includes beside the operator's accounts (docs/shared-bus.md)."},
		{name: "system_user", kind: sectionValue, section: systemUserSection, doc: "Under accounts: account, the operator's user of the servers' system account that a server with reload: system is asked to reload as; meshctl writes no system user of its own."},
		{name: "operator", kind: sectionValue, section: operatorSection, doc: "With bus.auth: jwt, the operator whose account the mesh is: an admin's nsc or `nats auth` store. Without it meshctl makes a fresh operator in its state directory: on the first apply for the embedded bus; for an external bus, `meshctl render -o server` makes it and prints the servers' config."},
		{name: "servers", kind: listValue, section: serverSection, doc: "The servers of a cluster, each with its own accounts file and reload; instead of url, accounts_file and reload."},
		{name: "jetstream", kind: sectionValue, section: jetstreamSection, doc: "The settings of the mesh's streams and of its hosts' consumers, for the whole mesh; a seat's or module's own override them."},
	})
	controllerSection = newSection("controller", []key{
		{name: "follows", kind: namesValue, doc: "Events the controller follows: module/event or seat:SEAT/event."},
		{name: "sends", kind: namesValue, doc: "Work the controller sends: SEAT/accept."},
		{name: "calls", kind: namesValue, doc: "Tools the controller calls: module/tool or seat:SEAT/tool."},
	})
	nodeSection = newSection("a node", []key{
		{name: "name", kind: scalarValue, required: true, doc: "The node's name."},
	})
	seatSection = newSection("a seat", []key{
		{name: "name", kind: scalarValue, required: true, doc: "The seat's name."},
		{name: "scope", kind: scalarValue, doc: "Whose role it is: module (the default) or mesh."},
		{name: "accepts", kind: namesValue, doc: "Kinds of work the seat takes."},
		{name: "emits", kind: namesValue, doc: "Events the seat's holder reports."},
		{name: "serves", kind: namesValue, doc: "Tools the seat's holder answers."},
		{name: "formerly", kind: namesValue, doc: "Names the seat had before; references under them still resolve."},
		{name: "stream", kind: sectionValue, section: streamSettingsSection, doc: "The settings of the seat's work queue, over bus.jetstream.streams.seats."},
		{name: "consumer", kind: sectionValue, section: consumerSettingsSection, doc: "The settings of the consumer the seat's holder takes work from, over bus.jetstream.consumers."},
	})
	moduleSection = newSection("a module", []key{
		{name: "name", kind: scalarValue, required: true, doc: "The module's name."},
		{name: "on", kind: namesValue, required: true, doc: "The nodes it runs on; each (node, module) is an instance."},
		{name: "claims", kind: namesValue, doc: "Seats it claims."},
		{name: "emits", kind: namesValue, doc: "Events it emits."},
		{name: "serves", kind: namesValue, doc: "Tools it serves."},
		{name: "follows", kind: namesValue, doc: "Events it follows: module/event or seat:SEAT/event."},
		{name: "sends", kind: namesValue, doc: "Work it sends: SEAT/accept."},
		{name: "calls", kind: namesValue, doc: "Tools it calls: module/tool or seat:SEAT/tool."},
		{name: "consumer", kind: sectionValue, section: consumerSettingsSection, doc: "The settings of each of its instances' consumers of the events it follows, over bus.jetstream.consumers."},
	})
	holderSection = newSection("a holder", []key{
		{name: "seat", kind: scalarValue, required: true, doc: "The seat handed over."},
		{name: "node", kind: scalarValue, required: true, doc: "The node of the instance that holds it."},
		{name: "module", kind: scalarValue, required: true, doc: "The module of the instance that holds it."},
	})
	observerSection = newSection("an observer", []key{
		{name: "name", kind: scalarValue, required: true, doc: "The observer's name; its user is observer.NAME."},
	})
	topSection = newSection("the top level of a mesh file", []key{
		{name: "bus", kind: sectionValue, section: busSection, doc: "Which bus the mesh lives on."},
		{name: "controller", kind: sectionValue, section: controllerSection, doc: "The control plane's own declared traffic."},
		{name: "nodes", kind: listValue, section: nodeSection, doc: "The machines of the mesh."},
		{name: "seats", kind: listValue, section: seatSection, doc: "Roles with a work queue, each taken by one module instance."},
		{name: "modules", kind: listValue, section: moduleSection, doc: "Programs that run on nodes."},
		{name: "holders", kind: listValue, section: holderSection, doc: "Explicit handovers: this instance holds this seat."},
		{name: "observers", kind: listValue, section: observerSection, doc: "Principals that only look: a person, a dashboard or a CI job reading the mesh's streams, consumers and heartbeats."},
	})
)

// SchemaID is the schema's $id: a name, not a place to fetch it from. Editors find the schema
// through the comment `# yaml-language-server: $schema=PATH` at the top of a description file,
// PATH being where `meshctl schema` wrote it (the repository keeps one at
// docs/mesh.schema.json, which its examples name).
const SchemaID = "urn:meshctl:mesh-description"

// Schema is the JSON Schema (draft 2020-12) of one YAML document of a description, indented,
// with a final newline. It says which keys each section holds and the kind of each value, no
// more: a document the schema accepts may still be refused by the loader (a name breaking the
// rules, a reference to nothing), but one the schema refuses the loader refuses too.
func Schema() []byte {
	doc := schemaObject(topSection)
	// An empty file or document is no declaration at all.
	doc["type"] = []string{"object", "null"}
	out := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         SchemaID,
		"title":       "meshctl mesh description",
		"description": "One YAML document of a meshctl mesh description. Generated by `meshctl schema`.",
	}
	maps.Copy(out, doc)
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		panic(err) // only maps, slices, strings and bools: cannot fail
	}
	return append(b, '\n')
}

// durationSchema is a Go duration: numbers with units, 90s, 1h30m, 1.5h.
var durationSchema = map[string]any{"type": "string", "pattern": `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`}

// orUnlimitedSchema is v, or the word unlimited where the key admits it.
func orUnlimitedSchema(k key, v map[string]any) map[string]any {
	if !k.unlimited {
		return maps.Clone(v)
	}
	return map[string]any{"anyOf": []any{v, map[string]any{"const": "unlimited"}}}
}

// stringLike is a scalar the loader reads as text: a string, or a whole number.
var stringLike = map[string]any{"type": []string{"string", "integer"}}

func schemaObject(s *section) map[string]any {
	props := map[string]any{}
	var required []string
	for _, k := range s.keys {
		v := schemaValue(k)
		v["description"] = k.doc
		props[k.name] = v
		if k.required {
			required = append(required, k.name)
		}
	}
	obj := map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		obj["required"] = required
	}
	return obj
}

func schemaValue(k key) map[string]any {
	switch k.kind {
	case scalarValue:
		return maps.Clone(stringLike)
	case namesValue:
		return map[string]any{"type": []string{"array", "null"}, "items": stringLike}
	case scalarsValue:
		return map[string]any{"type": []string{"string", "integer", "array"}, "items": stringLike}
	case integerValue:
		v := map[string]any{"type": "integer"}
		if k.max > 0 {
			v["minimum"], v["maximum"] = k.min, k.max
		}
		return v
	case sizeValue:
		return orUnlimitedSchema(k, map[string]any{"oneOf": []any{
			map[string]any{"type": "integer", "minimum": k.min, "maximum": k.max},
			map[string]any{"type": "string", "pattern": sizeForm.String()},
		}})
	case durationValue:
		return orUnlimitedSchema(k, durationSchema)
	case countValue:
		return orUnlimitedSchema(k, map[string]any{"type": "integer", "minimum": k.min, "maximum": k.max})
	case enumValue:
		return map[string]any{"enum": k.enum}
	case durationsValue:
		return map[string]any{"type": "array", "minItems": 1, "items": durationSchema}
	case boolValue:
		return map[string]any{"type": "boolean"}
	case sectionValue:
		return schemaObject(k.section)
	case listValue:
		return map[string]any{"type": []string{"array", "null"}, "items": schemaObject(k.section)}
	case reloadValue:
		return map[string]any{"oneOf": []any{map[string]any{"enum": []string{"none", "system"}}, schemaObject(k.section)}}
	}
	panic("model: a key of unknown kind: " + k.name)
}
