// Package reconcile reads the live bus, plans against the derivation, applies the plan and
// records what was done.
//
// It owns the I/O of a reconcile and nothing of its logic: what to change is the plan
// package's pure decision, and the JetStream calls themselves are package jsapi's. It reads
// streams and consumers in pages, never one by one; it applies a plan whole or not at all (a
// conflict or a refused change stops it before any call), in the plan's order, sending whole configs, and the accounts config through the
// accounts package, which checks, writes, reloads, proves and puts back. A converged bus costs the
// read and nothing else: no mutating call, no write, no reload. An apply that changes
// bus.auth, allowed by the operator, first revokes every credential of the old kind
// (nkey.go), and what rewrites the accounts config without a plan never carries that change.
// With bus.auth: jwt the accounts config is the account's JWT (jwt.go): the session connects
// the operator's system user beside the controller, whose creds it mints once, the plan shows
// the account's change, and an apply pushes it after the streams and consumers, through the
// accounts package's JWT backend; nothing of the file backend runs. The operator is the one
// bus.operator names, or the one meshctl makes once in <state>/nsc (the embedded bus's first
// use, or `meshctl render -o server` for an external bus), and the embedded bus then runs in
// operator mode trusting it.
//
// "Whose bus is this" is answered by the accounts package (every accounts file names the store
// that wrote it); reconcile asks it before a store installs or rewrites anything. And on
// an external bus it keeps the store's copy on the bus current through the session's
// connection, and rebuilds a lost store from it (restore.go); what a record is and when one is
// written are the state package's, how the bucket holds them the replica package's.
//
// And it owns the cycle (cycle.go), one reconcile whole, the same for a one-shot `meshctl
// apply` and for each of `meshctl watch`'s: the apply lock taken, the description loaded by
// the caller's Load, the session kept, dialled again or connected afresh, the embedded bus
// rejoined and the apply lock on the bus taken, the reconcile, and both locks released.
// Nothing outside a cycle takes or releases its locks; when a cycle runs, and what its
// outcome means, are the caller's.
package reconcile
