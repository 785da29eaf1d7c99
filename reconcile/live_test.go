package reconcile

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/plan"
	"github.com/meshbus/meshctl/render"
)

func TestCreateFromEmptyThenConverged(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	res := f.mustApply(ctx, s)
	if got := res.Plan.Summary(); got.Create != 4+6 || got.Update != 1 {
		t.Fatalf("first apply: %+v", got)
	}
	f.mustConverge(ctx, s)

	// The apply is recorded, and the inventory is what was applied.
	hist, err := f.store.History(ctx, 0)
	if err != nil || len(hist) != 1 || hist[0].Outcome != "applied" || !strings.Contains(hist[0].Summary, "10 to create") {
		t.Fatalf("history: %+v %v", hist, err)
	}
	inv, err := f.store.Inventory(ctx)
	if err != nil || len(inv.Holders) != 1 || inv.Holders[0].Module != "postman" {
		t.Fatalf("inventory: %+v %v", inv, err)
	}
}

func TestEveryMutableFieldIsUpdatedInPlace(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	// Push consumers: they have every mutable field a pull consumer has, and two more (the
	// server refuses a deliver group or a rate limit on a pull consumer).
	f := newFixture(t, strings.Replace(quickMesh, "bus:\n", "bus:\n  consumers: push\n", 1))
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	js := f.js(s)

	streamEdits := map[string]func(*jetstream.StreamConfig){
		"description":          func(c *jetstream.StreamConfig) { c.Description = "edited by hand" },
		"max_age":              func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour },
		"max_msgs":             func(c *jetstream.StreamConfig) { c.MaxMsgs = 10 },
		"max_bytes":            func(c *jetstream.StreamConfig) { c.MaxBytes = 1 << 20 },
		"max_msgs_per_subject": func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = 5 },
		"max_msg_size":         func(c *jetstream.StreamConfig) { c.MaxMsgSize = 1024 },
		"max_consumers":        func(c *jetstream.StreamConfig) { c.MaxConsumers = 5000 },
		"discard":              func(c *jetstream.StreamConfig) { c.Discard = jetstream.DiscardNew },
		"duplicate_window":     func(c *jetstream.StreamConfig) { c.Duplicates = time.Minute },
		"subjects":             func(c *jetstream.StreamConfig) { c.Subjects = append(c.Subjects, "mesh.extra.>") },
		"metadata": func(c *jetstream.StreamConfig) {
			c.Metadata = map[string]string{render.OwnerKey: render.OwnerValue, "x": "y"}
		},
	}
	for field, edit := range streamEdits {
		info, err := mustStream(ctx, t, js, "EVENTS").Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cfg := info.Config
		edit(&cfg)
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatalf("editing %s by hand: %v", field, err)
		}
		expectOneUpdate(ctx, t, f, s, "stream EVENTS", field)
	}

	consumerEdits := map[string]func(*jetstream.ConsumerConfig){
		"description":     func(c *jetstream.ConsumerConfig) { c.Description = "edited" },
		"ack_wait":        func(c *jetstream.ConsumerConfig) { c.AckWait = time.Minute },
		"max_deliver":     func(c *jetstream.ConsumerConfig) { c.MaxDeliver = 5 },
		"max_ack_pending": func(c *jetstream.ConsumerConfig) { c.MaxAckPending = 10 },
		// The server takes a backoff's first step as the ack wait: one equal to it changes
		// the backoff alone.
		"backoff": func(c *jetstream.ConsumerConfig) { c.BackOff = []time.Duration{c.AckWait, 2 * time.Minute} },
		"filter_subjects": func(c *jetstream.ConsumerConfig) {
			c.FilterSubject, c.FilterSubjects = "", []string{"mesh.mod.shop.event.order.placed", "mesh.mod.shop.event.other"}
		},
		"headers_only":       func(c *jetstream.ConsumerConfig) { c.HeadersOnly = true },
		"rate_limit_bps":     func(c *jetstream.ConsumerConfig) { c.RateLimit = 1 << 20 },
		"inactive_threshold": func(c *jetstream.ConsumerConfig) { c.InactiveThreshold = time.Hour },
		"metadata": func(c *jetstream.ConsumerConfig) {
			c.Metadata = map[string]string{render.OwnerKey: render.OwnerValue, "x": "y"}
		},
		"deliver_group": func(c *jetstream.ConsumerConfig) { c.DeliverGroup = "intruders" },
	}
	for field, edit := range consumerEdits {
		c, err := js.PushConsumer(ctx, "EVENTS", "beta_postman")
		if err != nil {
			t.Fatal(err)
		}
		cfg := c.CachedInfo().Config
		edit(&cfg)
		if _, err := js.UpdatePushConsumer(ctx, "EVENTS", cfg); err != nil {
			t.Fatalf("editing %s by hand: %v", field, err)
		}
		expectOneUpdate(ctx, t, f, s, "consumer EVENTS/beta_postman", field)
	}
}

func mustStream(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) jetstream.Stream {
	t.Helper()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// expectOneUpdate plans exactly one in-place update of one field, applies it, and converges.
func expectOneUpdate(ctx context.Context, t *testing.T, f *fixture, s *Session, id, field string) {
	t.Helper()
	p, err := s.Plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Changes) != 1 || p.Changes[0].ID() != id || p.Changes[0].Action != plan.Update ||
		len(p.Changes[0].Fields) != 1 || p.Changes[0].Fields[0].Field != field {
		var b strings.Builder
		_ = p.Text(&b, false)
		t.Fatalf("a hand edit of %s on %s should plan one update of it:\n%s", field, id, b.String())
	}
	_, counting, err := f.apply(ctx, s, RunOptions{})
	if err != nil || counting.Mutations.Load() != 1 {
		t.Fatalf("updating %s of %s: %d calls, %v", field, id, counting.Mutations.Load(), err)
	}
	f.mustConverge(ctx, s)
}

func TestAnImmutableChangeIsAReplacementRefusedWhileMessagesAreAtStake(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	pw := f.mint(ctx, "alpha.shop")
	f.mustApply(ctx, s)
	js := f.js(s)
	// The seat's work queue is remade by hand in memory: storage cannot be updated in place.
	if err := js.DeleteStream(ctx, "SEAT_MAILER"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "SEAT_MAILER", Subjects: []string{"mesh.seat.mailer.accept.>"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.MemoryStorage, Metadata: map[string]string{render.OwnerKey: render.OwnerValue},
	}); err != nil {
		t.Fatal(err)
	}
	shop, err := jetstream.New(dialAs(ctx, t, s, "alpha.shop", pw).Conn)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := shop.Publish(ctx, "mesh.seat.mailer.accept.send", []byte("work")); err != nil {
			t.Fatal(err)
		}
	}
	res, counting, err := f.apply(ctx, s, RunOptions{})
	if !errors.Is(err, ErrBlocked) || counting.Mutations.Load() != 0 {
		t.Fatalf("a replacement with messages at stake was not refused whole: %v, %d calls", err, counting.Mutations.Load())
	}
	var replace *plan.Change
	for i, c := range res.Plan.Changes {
		if c.ID() == "stream SEAT_MAILER" {
			replace = &res.Plan.Changes[i]
		}
	}
	if replace == nil || replace.Action != plan.Replace || replace.AtStake.Messages != 3 || !strings.Contains(replace.Refused, "3 stored messages") {
		t.Fatalf("the plan does not say the replacement loses 3 messages: %+v", replace)
	}
	if info, err := mustStream(ctx, t, js, "SEAT_MAILER").Info(ctx); err != nil || info.State.Msgs != 3 {
		t.Fatalf("the refused apply touched the stream: %v", err)
	}
	if _, _, err := f.apply(ctx, s, RunOptions{AllowDataLoss: true}); err != nil {
		t.Fatalf("with --allow-data-loss: %v", err)
	}
	f.mustConverge(ctx, s)
}

// A same-named stream meshctl does not own is left alone with what depends on it (its
// consumers), and everything else in the plan is healed: a consumer deleted and a max_age
// edited elsewhere. The apply fails with ErrConflict, naming the stream.
func TestAForeignStreamBlocksOnlyWhatDependsOnIt(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	js := f.js(s)
	if err := js.DeleteStream(ctx, "NODES"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "NODES", Subjects: []string{"someone.elses.>"}}); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(ctx, "EVENTS", "beta_postman"); err != nil {
		t.Fatal(err)
	}
	info, err := mustStream(ctx, t, js, "SEAT_MAILER").Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	edited := info.Config
	edited.MaxAge = time.Hour
	if _, err := js.UpdateStream(ctx, edited); err != nil {
		t.Fatal(err)
	}

	res, _, err := f.apply(ctx, s, RunOptions{})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "stream NODES") {
		t.Fatalf("an apply with a conflict: %v; want ErrConflict naming stream NODES", err)
	}
	if res.Plan.Changes[0].Action != plan.Conflict || res.Plan.Changes[0].Name != "NODES" {
		t.Fatalf("first change %+v", res.Plan.Changes[0])
	}
	for _, c := range res.Plan.Changes {
		if c.Stream == "NODES" {
			t.Errorf("the plan holds %s, which depends on the stream in conflict", c.ID())
		}
	}
	// Healed: what does not depend on NODES is planned no more; the conflict stays.
	p, err := s.Plan(ctx, f.mesh(), plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Changes) != 1 || p.Changes[0].Action != plan.Conflict {
		var b strings.Builder
		_ = p.Text(&b, false)
		t.Fatalf("after the apply, more than the conflict is left:\n%s", b.String())
	}
	info, err = mustStream(ctx, t, js, "NODES").Info(ctx)
	if err != nil || info.Config.Subjects[0] != "someone.elses.>" || plan.Owned(info.Config.Metadata) {
		t.Fatalf("the foreign stream was changed: %+v %v", info.Config, err)
	}
	hist, err := f.store.History(ctx, 0)
	if err != nil || !strings.Contains(hist[0].Outcome, "conflict") {
		t.Fatalf("the history does not record the conflict: %+v %v", hist, err)
	}
}

func TestAnObjectDeletedOutOfBandIsRecreated(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	js := f.js(s)
	if err := js.DeleteConsumer(ctx, "NODES", "alpha"); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "SEAT_MAILER"); err != nil {
		t.Fatal(err)
	}
	_, counting, err := f.apply(ctx, s, RunOptions{})
	if err != nil || counting.Mutations.Load() != 3 {
		t.Fatalf("recreating a stream, its worker and a consumer took %d calls: %v", counting.Mutations.Load(), err)
	}
	f.mustConverge(ctx, s)
}

func TestAHolderChangeKeepsTheQueuedWork(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	two := strings.Replace(quickMesh, "  - name: postman\n", "  - name: courier\n    on: [alpha]\n    claims: [mailer]\n  - name: postman\n", 1)
	f := newFixture(t, two)
	s := f.connect(ctx)
	pw := f.mint(ctx, "alpha.shop", "alpha.courier", "beta.postman")
	f.mustApply(ctx, s)

	// shop sends five pieces of work while courier (the first claimant) holds the seat and
	// takes none.
	shop := dialAs(ctx, t, s, "alpha.shop", pw)
	for i := range 5 {
		if err := shop.Publish("mesh.seat.mailer.accept.send", []byte{byte('0' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := shop.Flush(); err != nil {
		t.Fatal(err)
	}
	// The seat is handed over to postman.
	f.write(two + "holders:\n  - seat: mailer\n    node: beta\n    module: postman\n")
	res := f.mustApply(ctx, s)
	if len(res.Plan.Holders) != 1 || res.Plan.Holders[0].To.Module != "postman" {
		t.Fatalf("holder move: %+v", res.Plan.Holders)
	}
	for _, c := range res.Plan.Changes {
		if c.Kind != plan.KindAccounts {
			t.Errorf("a handover touched %s; only permissions should change", c.ID())
		}
	}
	postman := dialAs(ctx, t, s, "beta.postman", pw)
	js, err := jetstream.New(postman.Conn)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 10)
	cc, _, err := host.Bind(ctx, js, render.SeatStreamName("mailer"), render.WorkerConsumer("mailer"), func(m jetstream.Msg) {
		got <- string(m.Data())
		_ = m.Ack()
	})
	if err != nil {
		t.Fatalf("the new holder cannot bind the worker: %v", err)
	}
	defer cc.Stop()
	seen := map[string]bool{}
	for len(seen) < 5 {
		select {
		case d := <-got:
			seen[d] = true
		case <-ctx.Done():
			t.Fatalf("the new holder received %d of the 5 queued messages", len(seen))
		}
	}
	// The old holder has lost the seat.
	courier := dialAs(ctx, t, s, "alpha.courier", pw)
	cjs, _ := jetstream.New(courier.Conn)
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := host.ConsumerInfo(short, cjs, render.SeatStreamName("mailer"), render.WorkerConsumer("mailer")); err == nil {
		t.Fatal("the former holder can still bind the seat's worker")
	}
	info := "$JS.API.CONSUMER.INFO." + render.SeatStreamName("mailer") + "." + render.WorkerConsumer("mailer")
	if _, err := courier.WaitViolation(ctx, info); err != nil {
		t.Fatalf("the former holder's bind was not refused as a permission violation: %v", err)
	}
}

func dialAs(ctx context.Context, t *testing.T, s *Session, user string, pw map[string]string) *busclient.Conn {
	t.Helper()
	c, err := busclient.Dial(ctx, s.Target, busclient.Credential{User: user, Password: pw[user]})
	if err != nil {
		t.Fatalf("%s cannot log in: %v", user, err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestTheServerStoppingHalfwayIsConvergedByTheNextApply(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	stopped := false
	_, _, err := f.apply(ctx, s, RunOptions{Progress: func(done, total int, c plan.Change, err error) {
		if done == 3 && !stopped {
			stopped = true
			s.Embedded.Server().Shutdown()
		}
	}})
	if err == nil {
		t.Fatal("an apply whose server stopped halfway reported success")
	}
	s.Close()
	s2 := f.connect(ctx)
	f.mustApply(ctx, s2)
	f.mustConverge(ctx, s2)
}

func TestAConfigTheServerRefusesLeavesTheOldOneLive(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := newFixture(t, quickMesh)
	s := f.connect(ctx)
	f.mustApply(ctx, s)
	before, err := os.ReadFile(s.Accounts.Path)
	if err != nil {
		t.Fatal(err)
	}
	// A config that passes the parser but locks the controller out: the verification after
	// the reload fails, and the previous file goes back, seen served.
	rendered, _ := accounts.Unstamp(before)
	err = s.Accounts.Write(ctx, []byte(replaceControllerHash(string(rendered))))
	if !errors.Is(err, accounts.ErrRefused) || !strings.Contains(err.Error(), "the server is seen serving it") {
		t.Fatalf("a config that locks the controller out was not refused: %v", err)
	}
	after, _ := os.ReadFile(s.Accounts.Path)
	if string(after) != string(before) {
		t.Fatal("the previous accounts config was not restored")
	}
	f.mustConverge(ctx, s)

	// A config the parser refuses is never installed.
	if err := s.Accounts.Write(ctx, []byte("accounts { MESH { users = [ { user: ")); err == nil {
		t.Fatal("a config that does not parse was installed")
	}
	if after, _ := os.ReadFile(s.Accounts.Path); string(after) != string(before) {
		t.Fatal("a config that does not parse replaced the live one")
	}
}

// replaceControllerHash swaps the controller's hash for one of another password.
func replaceControllerHash(conf string) string {
	const marker = `{ user: "controller", password: "`
	i := strings.Index(conf, marker) + len(marker)
	j := strings.Index(conf[i:], `"`)
	return conf[:i] + "$2a$04$abcdefghijklmnopqrstuu5Ltm8kM2bVNRl9hH8v3Yw1RsF7QWzQy" + conf[i+j:]
}
