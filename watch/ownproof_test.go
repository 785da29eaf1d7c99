package watch

import (
	"context"
	"log/slog"
	"sync"
	"testing"
)

// Item 10 of issue 22: watch logged an ERROR for its own generation principal's login, at
// start and at every reconcile (the embedded server's log of the login it refused), so an
// operator's alert on errors fired on meshctl's own check that the bus serves its file.
func TestMeshctlsOwnProofsLogNoError(t *testing.T) {
	t.Parallel()
	errs := &errorRecords{}
	h := startWatch(t, quickstart(t), func(c *Config) {
		c.Logger = slog.New(errs.wrap(c.Logger.Handler()))
	})
	h.waitFor(0, "applying the quickstart at start", is(TriggerStart, OutcomeOK))
	mark := h.mark()
	h.write("audit.yaml", auditModule)
	h.waitFor(mark, "applying the edit", is(TriggerFiles, OutcomeOK))
	h.stop()
	for _, r := range errs.taken() {
		t.Errorf("logged at error level on a bus nobody but meshctl used: %s", r)
	}
}

// errorRecords keeps what is logged at error level, passing every record on.
type errorRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (e *errorRecords) wrap(next slog.Handler) slog.Handler { return errorHandler{next, e} }

func (e *errorRecords) taken() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.msgs...)
}

type errorHandler struct {
	slog.Handler
	records *errorRecords
}

func (h errorHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.records.mu.Lock()
		h.records.msgs = append(h.records.msgs, r.Message)
		h.records.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

func (h errorHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return errorHandler{h.Handler.WithAttrs(attrs), h.records}
}

func (h errorHandler) WithGroup(name string) slog.Handler {
	return errorHandler{h.Handler.WithGroup(name), h.records}
}
