// Package bus owns the server side of meshctl's edge onto NATS: the bus meshctl runs
// in-process when the mesh names none, the checks of an accounts config by the server's own
// parser, and the reloads that make one live. The connection to a bus is busclient's.
//
// What it owns:
//
//   - The embedded bus (StartEmbedded, RunningEmbedded): nats-server in-process, configured by
//     files under StateDir/bus that an operator can read, whose accounts file a reload re-reads
//     and parses in memory with the server's own settings (serverConfig), and
//     discoverable by a second meshctl process so one state directory never gets two servers.
//     That process reloads it, and holds it up while it needs it, through the control socket
//     the serving process answers on (ControlReloader, Hold): a signal would kill a serving
//     process that does not expect one. In operator mode (EmbeddedOptions.Operator) it has no
//     accounts file: it trusts an operator and keeps account JWTs in a NATS resolver under
//     StateDir/bus/jwt, which take every change as a push over the system account.
//   - The statements that put a server in operator mode (OperatorMode.Statements), written
//     once for the embedded bus and for an operator's own servers alike.
//   - Checking and applying an accounts config (CheckConfig, CheckAccounts, Reloader): the
//     server's own parser judges a rendered file before it replaces the live one, and a Reloader
//     makes it live on whichever server runs it.
//   - Reading a server's log (ServerLog, ParseServerViolation): its refusals, named by
//     principal, and the logins it refused.
//
// What it must not do: decide what the accounts file says (render does), decide when to reload
// (reconcile does), or ever put a password into an error, a log line or a file other than the
// accounts file's bcrypt hashes.
package bus
