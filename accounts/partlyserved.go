package accounts

// PartlyServed is an accounts change that some servers of a cluster serve and some do not
// yet: a server down, or one whose reload is the operator's. It wraps the error that says
// why (ErrServerDown, ErrNotLive), so a command can say through which servers a credential
// already logs in, instead of that it cannot log in at all. Servers are named as messages
// name them ("server host:port"), in the description's order.
type PartlyServed struct {
	// Serving are the servers seen serving the new config, Behind the others.
	Serving, Behind []string
	err             error
}

func (e *PartlyServed) Error() string { return e.err.Error() }
func (e *PartlyServed) Unwrap() error { return e.err }
