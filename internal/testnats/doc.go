// Package testnats builds the nats-server binary the tests run as a separate process (the
// module's pinned release, or the one MESHCTL_TEST_NATS_SERVER names) and writes the
// self-signed certificates they serve. It imports nothing of meshctl, so every package's tests
// can use it, bus's own included.
package testnats
