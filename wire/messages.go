package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// DefaultSyncTimeout is how long the controller waits, unless told otherwise, for a node to
// apply what it was declared (a reload of the bus included); a node's agent expects a refused
// login that long after enrolling.
const DefaultSyncTimeout = time.Minute

// The messages between the controller and a node's agent, as JSON. A membership in any of them
// is sealed (Seal) to the node's key: the streams and the wire carry no plaintext password.

// EnrolAnswer is the controller's answer to an enrolment request, sent to the address the
// request carried. Exactly one of Membership and Refused is set.
type EnrolAnswer struct {
	Node string `json:"node"`
	// Membership is the node's own membership (a Membership as JSON), sealed to the key the
	// request carried.
	Membership []byte `json:"membership,omitempty"`
	// Refused says why the node was not enrolled.
	Refused string `json:"refused,omitempty"`
}

// Declaration is what the controller declares a node runs: published to the node's declare
// subject, kept in NODES (the latest per node) for the node's agent to take.
type Declaration struct {
	Node string `json:"node"`
	// Generation counts the node's declarations; a report names the one it applied, so a
	// report about an older one is known to be superseded.
	Generation uint64     `json:"generation"`
	Instances  []Instance `json:"instances"`
}

// Digest identifies what a declaration says, apart from its generation and its sealed
// memberships: two declarations with one digest declare the same instances doing the same jobs.
// The credentials are tracked beside it, by hash (see Changed).
func (d Declaration) Digest() string {
	bare := Declaration{Node: d.Node, Instances: make([]Instance, len(d.Instances))}
	for i, in := range d.Instances {
		in.Membership = nil
		bare.Instances[i] = in
	}
	data, _ := json.Marshal(bare)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Instance is one module instance a node runs: what it emits, follows, serves, sends and calls
// (as subjects), the seats it holds, the consumers it binds, and its membership.
type Instance struct {
	User      string     `json:"user"`
	Module    string     `json:"module"`
	Emits     []string   `json:"emits,omitempty"`
	Follows   []string   `json:"follows,omitempty"`
	Serves    []string   `json:"serves,omitempty"`
	Sends     []string   `json:"sends,omitempty"`
	Calls     []string   `json:"calls,omitempty"`
	Holds     []string   `json:"holds,omitempty"`
	Consumers []Consumer `json:"consumers,omitempty"`
	// Membership is the instance's membership (a Membership as JSON) sealed to the node's
	// key. It is left out of the digest: it is sealed afresh with a random ephemeral key each
	// time, and what it opens to is tracked by the credential's hash instead.
	Membership []byte `json:"membership,omitempty"`
	// JWT, in a jwt mesh (bus.auth: jwt), is the instance's user JWT now: the one its
	// membership was minted with, or a JWT issued since for the same key when its grants
	// changed. The agent writes it into the membership in place of the membership's own, so
	// a new JWT needs no seed: the controller never holds one after minting it. Not secret on
	// its own, it is part of the digest: a new JWT is a new generation.
	JWT string `json:"jwt,omitempty"`
	// ByHand says an operator issued the instance's credential by hand (`meshctl credentials
	// issue`) to a host of their own: the declaration carries no membership for it, and the
	// agent leaves the instance's membership alone, neither writing nor removing it.
	ByHand bool `json:"by_hand,omitempty"`
}

// Consumer is a consumer an instance binds.
type Consumer struct {
	Stream string `json:"stream"`
	Name   string `json:"name"`
}

// Report is what a node's agent files after applying a declaration: the generation it
// applied, the users whose memberships it wrote, and those it could not, with why (and, under
// ReportRemoval, what it could not remove).
type Report struct {
	Generation uint64            `json:"generation"`
	Applied    []string          `json:"applied,omitempty"`
	Failed     map[string]string `json:"failed,omitempty"`
}

// ReportRemoval is the key of a report's Failed under which the agent says why it could not
// remove the memberships no longer declared.
const ReportRemoval = "(removing)"

// Heartbeat is what a node's agent says every interval, on core NATS: nothing is stored.
type Heartbeat struct {
	At         time.Time `json:"at"`
	Generation uint64    `json:"generation"`
}
