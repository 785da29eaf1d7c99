// Package bus owns meshctl's two edges onto NATS: the connection to the bus, and the bus meshctl
// runs in-process when the mesh names none.
//
// What it owns:
//
//   - Dialling (Dial, Target, Credential). Every principal dials the same way: its user and
//     password beside the address, never inside it, an inbox prefix of its own (the only inbox it
//     is granted — seed 000), and, when the mesh pins one, the bus's certificate by fingerprint.
//     A connection error names the address alone: errors are written on the assumption they are
//     logged, and a URL with a password in it is a password in a log.
//   - Reporting refusals (Conn.Violations, Conn.WaitViolation). A missing grant surfaces on the
//     client as a timeout or "no responders" (NATS-FACTS.md, "Permissions a restricted user
//     needs"); the server says what it refused only through the async error handler, so Dial
//     always installs one and turns each refusal into a *PermissionError naming user, operation
//     and subject.
//   - The embedded bus (StartEmbedded, RunningEmbedded): nats-server in-process, configured by
//     files under StateDir/bus that an operator can read, whose accounts file a reload re-reads
//     and parses in memory with the server's own settings (serverConfig), and
//     discoverable by a second meshctl process so one state directory never gets two servers.
//     That process reloads it, and holds it up while it needs it, through the control socket
//     the serving process answers on (ControlReloader, Hold): a signal would kill a serving
//     process that does not expect one.
//   - Checking and applying an accounts config (CheckConfig, CheckAccounts, Reloader): the
//     server's own parser judges a rendered file before it replaces the live one, and a Reloader
//     makes it live on whichever server runs it.
//   - Test support (StartTestBus): one real server per test, on a random port in the test's own
//     directory, never a shared bus (seed 003).
//
// What it must not do: decide what the accounts file says (render does), decide when to reload
// (reconcile does), or ever put a password into an error, a log line or a file other than the
// accounts file's bcrypt hashes.
package bus
