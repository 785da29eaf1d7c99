// Package testnats builds the nats-server binary the tests run as a separate process (the
// module's pinned release, or the one MESHCTL_TEST_NATS_SERVER names) and writes the
// certificates they serve and present: self-signed, as the mesh's own bus is, or signed by a
// CA the test makes (servers' leaves, renewed in place, and clients' certificates). It imports
// nothing of meshctl, so every package's tests can use it, bus's own included.
package testnats
