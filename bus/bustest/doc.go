// Package bustest starts real buses for tests: an embedded bus (StartTestBus), the
// nats-server binary as a process of its own with TLS and a pid file (StartTestServer), and a
// JetStream cluster of such processes (StartTestCluster, or NewTestCluster to start it later,
// as on its first start). One server per test, on a random port in the test's own directory,
// never a shared bus: parallel tests on one bus delete each other's objects by their fixed
// names.
//
// It is test support: meshctl's binary does not link it (the benchmark driver does, to start
// the servers it measures against). It must not reach a bus it did not start.
package bustest
