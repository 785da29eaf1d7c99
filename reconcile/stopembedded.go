package reconcile

import (
	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/render"
)

// ownUsers are the users only meshctl logs in as: the controller and the generation principal.
// A one-shot command's connections as them acknowledge no delivery — what it writes (streams,
// consumers, a drain's moved and deleted messages) is on disk when the server answers — so a
// bus they alone used may be left to stop with the process (bus.Embedded.StopForExit). `watch`,
// whose controller loop acknowledges CONTROL and EVENTS messages, always stops its bus cleanly.
var ownUsers = []string{render.ControllerUser, accounts.GenerationUser}

// stopEmbedded stops the embedded bus this session serves: for a one-shot command whose process
// exits after Close, without the server's slow stop when only meshctl used the bus, and cleanly
// otherwise, saying so first when that takes long.
func (s *Session) stopEmbedded() {
	slow := func() {
		if n := embeddedConsumers(s.Embedded); n >= largeBus {
			// Said before, so a minute of stopping does not look like a hang.
			s.logf("stopping the embedded bus: %d consumers, about %s (nats-server stops them one at a time)",
				n, stopEstimate(n))
		}
	}
	if s.opts.ExitsAfterClose && !s.opts.OwnEmbedded {
		s.Embedded.StopForExit(ownUsers, slow)
		return
	}
	slow()
	s.Embedded.Shutdown()
}
