// Package floor is the bare-client floor meshctl's benchmarks compare it with: what a plain
// nats.go client needs to create a mesh's streams and consumers, and to list them back in
// pages, with as many calls in flight as an apply keeps. The bench command (its -floor
// processes) and reconcile's scale benchmarks both time these same functions.
//
// It owns the floor's operations and the floor's bus: an embedded bus configured as
// meshctl's, with one unrestricted user. It must not use meshctl's own path (no plan, no
// reconcile, no credentials of the store): a floor that shared it would measure meshctl
// against itself. Timing is the callers'.
package floor
