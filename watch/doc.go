// Package watch is `meshctl watch`: the control host's loop that keeps the bus equal to
// the description in a directory, for as long as it runs.
//
// It owns when to reconcile, and nothing of how: each reconcile is a cycle of
// reconcile.Cycles, the one a one-shot `meshctl apply` runs, which takes the apply lock, loads
// the description, keeps or connects the session, reconciles and releases the locks. What
// watch keeps is the triggers and what a cycle's outcome means (cycle.go): the Outcome, the
// advisories heard on its connection, the controller beside it, the metrics, the log line
// and the state file. A reconcile runs once at start, after every change under the
// directory (debounced, so a `git pull` touching fifty files makes one), when the bus
// announces that one of its streams or consumers was deleted or a stream's config changed
// (JetStream's advisories, debounced the same way; the advisories of watch's own changes are told apart and cause
// nothing), on a resync interval (the safety net for drift no advisory announces — a
// consumer's config changed in place, the accounts file edited by hand), when the grace of a seat's former holder
// to acknowledge the work it took ends (the reconcile takes that grant away), and on SIGHUP. A description that does not validate is reported and
// nothing is applied, so the last good state stays live; a plan the reconciler refuses
// (data at stake, a conflict) is reported every cycle and never forced; a bus that is
// down is retried with a capped backoff.
//
// Lifecycle: Run opens the state store, starts the tree watcher (inotify, or polling
// when inotify runs out of watches) and the metrics server, then runs the loop until its
// context ends. One goroutine — Run's own — owns the loop's state and selects on the
// context, file events, the debounce timer, the resync ticker, the retry timer, SIGHUP
// and the results of the reconcile it started; each reconcile runs on a goroutine of its
// own so that a SIGHUP reloads the embedded bus at once, even while a reconcile waits
// for another meshctl's apply lock. On return everything Run started has stopped: the
// reconcile in flight (abandoned at a safe point: the reconciler leaves a bus the next
// apply converges), the embedded bus, the tree watcher and the metrics server.
//
// The reload contract: with the embedded bus, watch serves it for the whole state
// directory, and one-shot commands in other terminals (apply, credentials issue and
// revoke) write its accounts file and have the bus reloaded through its control socket
// (bus.ControlReloader) rather than start a second server; no signal is sent to watch.
// SIGHUP is the operator's (`systemctl reload`): watch reloads its embedded bus first,
// then reconciles.
//
// Beside the reconcile loop it runs the controller loop (package controller) on the bus the
// reconcile connected to, handing it each description the bus was brought to; when the
// controller minted or revoked a credential it asks for a reconcile, so the reconcile loop stays
// the one writer of the accounts config. The controller is started anew when the session came
// back with a controller credential minted since. What it heard of the nodes' heartbeats is
// written to STATE/heartbeats.json for `meshctl status`, at a bounded rate (heartbeats.go);
// the state its reconciles left, an invalid description's problems or a refusal's reason
// included, to STATE/watch.json when that state changes (laststate.go): /healthz names the
// state alone. On the same connection as the advisories of drift it hears those of dead
// letters, messages a consumer delivered max_deliver times unacknowledged: each is counted per
// consumer in the store for `meshctl status`, logged once and exported (deadletters.go).
//
// What it must not do: force a refused plan, apply a description that does not
// validate, or log a password: logs carry plan summaries, object names and errors, which
// the reconciler writes without credentials.
package watch
