package replica

import "context"

// Freeze stops the lease's renewals as a holder frozen (SIGSTOP) or dead would: it keeps
// counting itself the holder until Held finds its last renewal too old.
func (l *Lease) Freeze() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
}

// Thaw is the frozen holder's first renewal once it runs again.
func (l *Lease) Thaw() error { return l.renew(context.Background()) }
