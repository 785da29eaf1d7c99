// Package accounts is the accounts config meshctl manages for its mesh: the file backend and
// the operator-mode JWT account.
//
// The file backend (File) is one accounts file per server, read and reloaded by that server.
// Its write reads as one path (write.go): the rendering is stamped with a generation principal
// (generation.go, its password derived from the controller's: authority.go) and the line
// naming the store that wrote it (manager.go), checked with the server's own parser, written
// atomically, reloaded, proven by a login as that principal — which only this file admits —
// and verified; or the previous file and its generation go back, are reloaded and proven. A
// cluster's servers are rolled through one at a time (File.Write), a refusal undoing the
// servers changed before it. The same login is how a plan learns that a server serves the file
// on disk (cluster.go), and the server's parser is how it reads the users served
// (servedusers.go). Under bus.accounts: account the file holds the MESH account alone, which
// the operator's accounts block includes beside accounts of its own (shared.go): it is the
// whole block's stamped rendering cut to the account, checked with the server's parser inside
// an accounts block, read back as the whole block, and nothing else of the server's config is
// read; meshctl then writes no system user, and reload: system asks as the operator's, whose
// secret it reads from the files the description names. The file backend owns, and must not
// give up:
//
//   - One manager per bus (manager.go): a store installs a file over one that lets a
//     controller in only where that file names this store, and rewrites none that would lock
//     out a host by a credential it neither minted nor revoked.
//   - "Done" only when proven: no write is reported served before a login as its generation
//     principal succeeds on that server, and no server is proven through another's connection.
//   - No secret in a message, and no file open to every user: the file holds every principal's
//     hash, and is written 0600 or as the file it replaces allows.
//
// What it does not own: the state store, the apply lock and the bus's JetStream API (the
// reconcile package takes the lock, reads the store and calls File), and what a file holds
// (render's rendering and plan's comparison).
//
// With `bus.auth: jwt` the servers run in operator mode and the mesh is one account of the
// operator's. Its config is an account JWT that meshctl signs and pushes to the servers' NATS
// resolver over a system-account connection: no file is written and no server reloads. Its
// principals are users of that account, each holding a user JWT and its nkey seed (a creds
// file). The JWT backend owns:
//   - The account JWT (Account.Encode): JetStream limits always set, `iat` strictly increasing
//     over the JWT it replaces (a tie in whole seconds lets servers disagree on which one is
//     newer), revocations carried over until the credentials they revoke have expired.
//   - A user's credential (Account.MintUser): a fresh user nkey and a user JWT carrying exactly
//     its grants.
//   - The resolver (Resolver): a push answered by every server named, each server's JWT of the
//     account read back (a 200 is not proof that a server applies the JWT), and the proof that
//     a revoked user is connected nowhere.
//   - A fresh operator (MakeOperator): for a deployment with none, an operator, its system
//     account and the mesh's account written in nsc's store layout, never over a store that
//     holds one; and the static config its servers are given (Operator.ServerConfig).
//   - The operator's store (LoadOperator, jwtstore.go): the keys and the system user read from
//     an admin's nsc or `nats auth` store, and refused when they would sign what the servers
//     ignore.
//   - The backend (JWT, jwtbackend.go), beside File: a plan from the newest JWT a server applies
//     and the store's users (a new JWT for the same key when grants change, a removed
//     principal's key revoked, what meshctl owns of the JWT set), and an apply that counts a
//     push only once every server applies it; the store records a new JWT in force, or a
//     revocation done, only then, and the next run settles what a crash left from the JWT the
//     servers hold.
//
// What it must not do: read, sign or push any account but the mesh's own, echo the JWT of
// another account, or put a seed into an error, a log line or a printed value (Creds prints
// as its public key).
package accounts
