package watch

// TriggerGrace is the end of a seat's former holder's grace: after a handover the holder before
// may still acknowledge the work it took for one ack wait (render.AckGrace), and the reconcile
// at its end takes that grant away, rather than leave it until the next resync.
const TriggerGrace = TriggerAdvisory << 1
