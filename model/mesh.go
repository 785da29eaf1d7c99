package model

import (
	"fmt"
)

// Pos is where something was declared: the file (relative to the loaded directory), line
// and column, all as an operator's editor shows them. A problem with a file or directory as
// a whole (a file refused unread, a directory without a description) has no line: Line and
// Col are 0, and File is "." for the loaded directory itself.
type Pos struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Col  int    `json:"col"`
}

func (p Pos) String() string {
	switch {
	case p.File == "":
		return "-"
	case p.Line == 0:
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Mesh is a validated description: every name follows the rules, every reference
// resolves, and seat references use the seat's current name even where the YAML used a
// former one.
type Mesh struct {
	Bus        Bus
	Controller Controller
	Nodes      []Node
	Seats      []Seat
	Modules    []Module
	// Holders are the explicit handovers, as declared.
	Holders []HolderDecl
	// Holding is who holds each seat that has a holder, sorted by seat: an explicit
	// holder where one is declared, otherwise the first module instance claiming it.
	Holding []Holding
	// Observers are the principals that only look — a person, a dashboard, a CI job — in
	// declaration order.
	Observers []Observer
}

// Bus says which bus the mesh lives on. Without URL, meshctl runs an embedded bus itself.
type Bus struct {
	URL string
	// Fingerprint pins the bus's leaf certificate: the hex SHA-256 of its DER, lower case without
	// separators, or several separated by spaces (a planned rotation, or a cluster's servers).
	Fingerprint string
	// CAFile, when set, is the PEM file of the CA that signs the external servers' certificates
	// (bus.ca_file): every connection verifies the server by it and by the server's name, and
	// every membership carries its text.
	CAFile string
	// CertFile and KeyFile, when set, are the client certificate and key presented where the
	// servers ask for one (verify: true): meshctl's own, read on the control host, and the
	// paths every membership names for its host's own.
	CertFile, KeyFile string
	AccountsFile      string // where meshctl writes the accounts config an external server includes
	Listen            string // the embedded bus's listen address
	// AllowPlaintextListen is the operator's word that the network the embedded bus listens
	// on is trusted: without it, a listen address off the loopback interface is refused,
	// since the bus serves no TLS and every principal logs in with a password.
	AllowPlaintextListen bool
	// AllowPlaintext is the operator's word that the network to the external servers is
	// trusted: without it, a nats:// URL off this host with no fingerprint is refused, since
	// the controller's password, and every host's, would cross it in clear text.
	AllowPlaintext bool
	Replicas       int
	Reload         Reload
	// Streams are the settings of the mesh's own streams and the default of its seats'
	// queues; ConsumerDefaults those of every host's consumer (a module's or seat's own
	// override them: Module.Consumer, Seat.Consumer).
	Streams          Streams
	ConsumerDefaults ConsumerSettings
	// Consumers is how hosts take deliveries, ConsumersPull or ConsumersPush: every consumer
	// the mesh derives is of that kind, and each principal is granted what that kind needs.
	Consumers string
	// Auth is how hosts log in, AuthPassword or AuthNkey: every principal of a node, its
	// enrolment identity and its module instances, and every observer, is a user of that
	// kind. meshctl's own
	// users (the controller, its system user, the generation principal) log in with
	// passwords either way.
	Auth string
	// Operator is bus.operator, with bus.auth: jwt: the operator's store an admin keeps. Nil
	// for a fresh operator meshctl makes in its state directory.
	Operator *Operator
	// Servers are the external bus's servers, each reading its own accounts file: one for
	// bus.url (named ""), the cluster's for bus.servers. Empty for the embedded bus.
	Servers []Server
	// Accounts is how much of the servers' accounts config meshctl writes (bus.accounts):
	// AccountsBlock, the whole block, or AccountsAccount, the MESH account alone (shared.go);
	// "" for a description without a bus section, whose embedded bus's file is the block.
	Accounts string
	// SystemUser is the operator's system user a server is reloaded by request as under
	// AccountsAccount (bus.system_user); nil where none is named.
	SystemUser *SystemUser
	Pos        Pos
}

// The kinds of consumer a mesh may derive. Pull is the default: the client libraries are
// leaving push (nats.go's jetstream keeps it "mainly for the purpose of ease of migration",
// npm nats v2's consumers.get refuses it, nats-py's nats-jetstream has none), and a pull
// consumer needs no deliver subject, so no subscribe grant beyond the principal's inbox.
const (
	ConsumersPull = "pull"
	ConsumersPush = "push"
)

// How hosts log in. Password is the default. An nkey user proves itself by signing the
// server's nonce with its seed, which the server checks against the public key in the
// accounts config: far cheaper than the bcrypt comparison a password user costs at every
// login and, at every reload, once for each connected client (docs/auth.md).
const (
	AuthPassword = "password"
	AuthNkey     = "nkey"
)

// Nkeys reports whether the mesh's hosts log in with nkeys.
func (b Bus) Nkeys() bool { return b.Auth == AuthNkey }

// secured reports whether a connection to a server pinned by fingerprint and verified by
// caFile speaks TLS whatever its URL's scheme: a pin, a CA or a client certificate makes TLS
// mandatory.
func (b Bus) secured(fingerprint, caFile string) bool {
	return fingerprint != "" || caFile != "" || b.CertFile != ""
}

// Embedded reports whether meshctl runs the bus itself.
func (b Bus) Embedded() bool { return b.URL == "" }

// Reload is how an external server is told to re-read its accounts config.
type Reload struct {
	PIDFile string   // SIGHUP the process whose pid this file holds
	Command []string // or run this command
	// Manual: neither; the operator reloads, and meshctl says the config is written but not live.
	Manual bool
	// System: ask the server itself, as meshctl's system user, with a request to
	// $SYS.REQ.SERVER.<id>.RELOAD (nats-server 2.10 and later), which answers with the
	// server's error when it refuses the config.
	System bool
}

// Controller is the control plane's own declared traffic: it files no manifest, so what it
// follows and sends to is declared here.
type Controller struct {
	Follows []EventRef
	Sends   []AcceptRef
	Calls   []ToolRef
	Pos     Pos
}

// Node is a machine of the mesh.
type Node struct {
	Name string
	Pos  Pos
}

// Observer is a principal that reads what meshctl manages (its streams, their consumers,
// the nodes' heartbeats) and publishes nothing a host would act on. Its user is
// `observer.<name>`.
type Observer struct {
	Name string
	Pos  Pos
}

// Seat scopes: a module seat is a role some application module takes; a mesh seat is a
// role of the mesh's own control plane (a build machine, say). The scope changes nothing
// on the bus; it tells reviewers whose role it is.
const (
	ScopeModule = "module"
	ScopeMesh   = "mesh"
)

// Seat is a role with a work queue: work is addressed to the seat, and exactly one module
// instance, its holder, takes it.
type Seat struct {
	Name    string
	Scope   string
	Accepts []string
	Emits   []string
	Serves  []string
	// Formerly lists names this seat had before. References under a former name resolve to
	// this seat, so renaming a seat does not break every module that named it.
	Formerly []string
	// Stream is the settings of its work queue, Consumer those of the consumer its holder
	// takes work from.
	Stream   StreamSettings
	Consumer ConsumerSettings
	Pos      Pos
}

// Module is a program that runs on one or more nodes; each (node, module) pair is an
// instance with its own user and consumer.
type Module struct {
	Name    string
	On      []string
	Claims  []string // seat names (current names, after resolving former ones)
	Emits   []string
	Serves  []string
	Follows []EventRef
	Sends   []AcceptRef
	Calls   []ToolRef
	// Consumer is the settings of each of its instances' consumers of what it follows.
	Consumer ConsumerSettings
	Pos      Pos
}

// EventRef names an event to follow: a module's (`shop/order.placed`) or a seat's
// (`seat:telegram-sender/delivered`).
type EventRef struct {
	Seat  bool
	Owner string
	Event string
	Pos   Pos
}

func (r EventRef) String() string { return refString(r.Seat, r.Owner, r.Event) }

// AcceptRef names work sent to a seat: `telegram-sender/send`.
type AcceptRef struct {
	Seat   string
	Accept string
	Pos    Pos
}

func (r AcceptRef) String() string { return r.Seat + "/" + r.Accept }

// ToolRef names a tool to call: a module's (`telegram/status`) or a seat's
// (`seat:telegram-sender/status`).
type ToolRef struct {
	Seat  bool
	Owner string
	Tool  string
	Pos   Pos
}

func (r ToolRef) String() string { return refString(r.Seat, r.Owner, r.Tool) }

func refString(seat bool, owner, name string) string {
	if seat {
		return "seat:" + owner + "/" + name
	}
	return owner + "/" + name
}

// HolderDecl is an explicit handover: this instance holds this seat, whatever claims say.
type HolderDecl struct {
	Seat   string
	Node   string
	Module string
	Pos    Pos
}

// Instance is one module running on one node.
type Instance struct {
	Node   string `json:"node"`
	Module string `json:"module"`
}

func (i Instance) String() string { return i.Node + "/" + i.Module }

// Holding is the resolved holder of a seat.
type Holding struct {
	Seat     string   `json:"seat"`
	Holder   Instance `json:"holder"`
	Explicit bool     `json:"explicit"`
}

// Instances lists every module instance in declaration order: modules as declared, each on
// its nodes in the order given.
func (m *Mesh) Instances() []Instance {
	var out []Instance
	for _, mod := range m.Modules {
		for _, n := range mod.On {
			out = append(out, Instance{Node: n, Module: mod.Name})
		}
	}
	return out
}

// Seat returns the seat of that current name.
func (m *Mesh) Seat(name string) (Seat, bool) {
	for _, s := range m.Seats {
		if s.Name == name {
			return s, true
		}
	}
	return Seat{}, false
}
