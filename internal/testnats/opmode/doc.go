// Package opmode starts what an operator-mode NATS shop runs, for tests of meshctl's JWT
// account: an operator made the way an admin makes one, with the nats CLI (natscli, built
// from the module proxy at a pinned release, never a dependency of meshctl's module), and a
// JetStream cluster of nats-server processes that trust it and keep accounts in the NATS
// resolver (`resolver { type: full }`).
//
// What it owns:
//
//   - NatsCLIBinary: the nats CLI, built once per machine and release into a directory under
//     os.TempDir, and once per test process checked.
//   - NewOperator: an operator store in the test's directory, as `nats auth operator add`
//     leaves it (the operator, its signing key and its SYSTEM account), plus an account OTHER
//     with a user and a user of the system account, each with its creds file.
//   - StartCluster: servers in operator mode on random ports in the test's directory, each
//     with a monitoring port, preloaded with the system account and OTHER, that a test can
//     stop and start again; StartClusterTrusting, the same servers trusting an operator the
//     test made itself, configured by the statements it gives.
//   - RunCLI: the nats CLI on an nsc store in a directory of the test's own.
//
// It is test support and imports nothing of meshctl but internal/testnats, so the package it
// tests can use it. It must not reach a server it did not start, and it never pushes or
// signs meshctl's own account: that is the code under test.
package opmode
