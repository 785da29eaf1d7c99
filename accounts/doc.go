// Package accounts is the accounts config meshctl manages for its mesh: today's file backend
// and the operator-mode JWT account.
//
// With `bus.auth: jwt` the servers run in operator mode and the mesh is one account of the
// operator's. Its config is an account JWT that meshctl signs and pushes to the servers' NATS
// resolver over a system-account connection: no file is written and no server reloads. Its
// principals are users of that account, each holding a user JWT and its nkey seed (a creds
// file). The JWT backend owns:
//
//   - The account JWT (Account.Encode): JetStream limits always set, `iat` strictly increasing
//     over the JWT it replaces (a tie in whole seconds lets servers disagree on which one is
//     newer), revocations carried over until the credentials they revoke have expired.
//   - A user's credential (Account.MintUser): a fresh user nkey and a user JWT carrying exactly
//     its grants.
//   - The resolver (Resolver): a push answered by every server named, each server's JWT of the
//     account read back (a 200 is not proof that a server applies the JWT), and the proof that
//     a revoked user is connected nowhere.
//
// What it must not do: read, sign or push any account but the mesh's own, echo the JWT of
// another account, or put a seed into an error, a log line or a printed value (Creds prints
// as its public key).
package accounts
