// Package state is meshctl's embedded store: the SQLite database in the state directory (by
// default on the control host) that keeps what git must not hold.
//
// It owns:
//
//   - the bcrypt hash of every principal's password (never a plaintext), or for an nkey principal
//     (bus.auth: nkey) its public key (never its seed), when and why it was minted; with
//     bus.auth: jwt, each principal's user key and the user JWT last issued for it, a newer one
//     pending until the push that revokes its predecessor is proven, and the keys revoked,
//     to revoke until a proven push carries them and kept settled after (jwt.go);
//   - meshctl's own password, the only plaintext at rest: the controller's, in
//     dir/controller.password (0600), minted on first use only and replaced only at the
//     operator's word (RotateControllerPassword); the passwords of meshctl's other principals
//     (its system user, each accounts file's generation principal) are derived from it
//     (DerivedPassword), so whoever holds it is the same authority;
//   - the last applied inventory (nodes, module instances, seats and their holders) and an
//     append-only log of every change of a seat's holder;
//   - the history of applies (who, from which host and git commit, when, what, with what outcome);
//   - what watch heard the bus complain of: the refusals lately (refusals.go), and each
//     consumer's dead letters, the messages delivered max_deliver times and never acknowledged
//     (deadletters.go);
//   - the apply lock, dir/apply.lock, which keeps two meshctl processes from applying at once;
//   - the store as records (replica.go, records.go): one JSON record a row a restore needs, under
//     keys a JetStream KV bucket takes — identity, credential.<principal>,
//     revocation.<principal>, enrolment.<node>, declaration.<node> (with its sealed copies),
//     report.<node>, apply.<id>, holder.<id> (ids zero-padded, so keys sort as ids), inventory,
//     and in a jwt mesh jwt-user.<principal> and jwt-revoked.<user key>.
//     Refusals, dead letters and password files are not records: the first two are logs, the
//     others plaintexts.
//     Snapshot gives them all; SetReplica hands a Replica the records every change commits,
//     before the method that made it returns; Restore rebuilds a store from them, Refresh
//     makes an existing one (a standby's) equal to them, and
//     AdoptControllerPassword takes the operator's password back after checking it against the
//     restored hash.
//
// Lifecycle: Open creates the directory (0700) and database (0600) if absent, refuses a file it
// cannot trust (corrupt, not SQLite, or written by a newer meshctl), and migrates an older schema
// in one transaction. Processes opening one directory at once do so one after the other, under a
// flock on the directory itself; a store already of this schema is opened without SQLite's write
// lock, so the commands that only read (status, diff, credentials list) do not wait for a
// writer. Callers take the apply lock with AcquireLock before they change the bus and record the
// result with RecordApply and SaveInventory; Close releases the database. A failure to open or
// write caused by a full disk wraps ErrNoSpace and names the state directory.
//
// With a replica set, every change commits locally first and is then written to the replica,
// in commit order; a replica that fails is said as ErrReplicaBehind, the change standing and
// the method's results valid, and the store's next change sends the replica the whole store
// with a deletion of every key the store may have dropped, so that it is equal again. A change
// that writes nothing (a converged inventory, a password that matches) and every read send the
// replica nothing.
//
// What it must not do:
//
//   - write, log or return in an error any password or nkey seed other than through the values
//     Mint, MintNkeys, EnrolNode, ControllerPassword, RotateControllerPassword and
//     SystemPassword return (and DerivedPassword computes), nor hand
//     one to a replica: the bus's security rests on the plaintext existing once;
//   - delete a row without leaving a row that says so (a revocation for a credential, a
//     revoked key for a jwt user, a settled key rather than none for a key revoked): a
//     replica catching up is told of deletions only through such rows (catchUp);
//   - recreate, truncate or "repair" a database it cannot read: the hashes in it are what lets
//     every node log in, and an empty store would lock the whole mesh out at the next reload;
//   - talk to the bus, render configuration or decide what to apply: it stores values that the
//     reconciler computed, and nothing in it depends on the YAML model. A Replica is the
//     caller's: the store only hands it records.
package state
