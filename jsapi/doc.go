// Package jsapi is meshctl's edge onto a bus's JetStream API: the calls a reconcile makes on
// the controller's connection, and nothing of when or why it makes them.
//
// What it owns:
//
//   - The API (API, DrainAPI, New): listing streams, and consumers in pages read a few at a
//     time and handed over as read (ConsumerPager, EachConsumerPage); the six mutating calls,
//     each sending a whole config; and what taking a stream out of service needs (a stream's
//     state, its messages one by one, a message's deletion, a publish, a consumer's pause).
//     Every call is bounded, so a bus that went away fails the call instead of hanging it; a
//     consumer's update is sent to the API itself, since the server's answer to it may be stale
//     (upsertConsumer).
//   - Riding out a cluster's leader changes (Retrying, RetryCall, Retry, Placing): every call
//     on a bus of several servers is asked again, within a bound, while an answer says a leader
//     is being elected.
//   - Refusing to change a bus this process no longer owns (Guarded): each mutating call asks
//     first.
//   - What a stream's lowered limits would discard, counted as the server counts a message's
//     bytes (Stored, CountDiscards, StillKept), and what the bus says it has room for
//     (Capacity).
//
// What it must not do: decide what to change (plan does) or in what order (reconcile does),
// hold a session, the store or the apply lock, or ever put a credential into an error.
package jsapi
