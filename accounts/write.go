package accounts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// File is where the accounts config lives, how the server is told to re-read it, and how
// meshctl then sees that the server serves it.
type File struct {
	Path     string
	Reloader bus.Reloader
	// Target is the server that includes Path, where the generation principal logs in to
	// prove a reload took (generation.go).
	Target busclient.Target
	// StateDir keeps the generation record of the file last written.
	StateDir string
	// controller is the controller's password, from which each file's generation principal's
	// password is derived (authority.go); "" where none was minted yet.
	controller string
	// Verify, when set, is checked once the server is seen serving the new file: for example
	// that the controller still logs in with JetStream. For a cluster, once every server is.
	// admitted says the controller's entry is byte for byte the one in the file the server
	// served before the change (so a connection of the controller's made before it is still
	// let in: a reload checks every connection against the new users).
	Verify func(ctx context.Context, admitted bool) error
	// Server names this server of a cluster in messages and in its generation record; ""
	// for the single server of bus.url or the embedded bus.
	Server string
	// Copy, when set, puts the file at Path onto a server that is not on the control host,
	// before each reload.
	Copy func(ctx context.Context, path string) error
	// Others are the cluster's other servers, each with its own file, reload and record
	// (cluster.go); a single server has none.
	Others []File
	// Manager is the line naming the store that writes the file (manager.go), put at its top.
	Manager string
	// Owned, when set, is asked before the file is written: nil while the writer may still
	// change the bus (the reconcile package's lease).
	Owned func() error
	// AccountOnly says the file holds the MESH account alone, which the server's own accounts
	// block includes (bus.accounts: account, shared.go); otherwise it holds the whole block.
	AccountOnly bool
}

// ErrNotLive is returned (wrapped) when the accounts config was written but the operator
// reloads the server: the change is on disk, not yet in force.
var ErrNotLive = bus.ErrReloadByOperator

// ErrRefused is returned (wrapped) when the server did not take a new accounts config: the
// reload failed or the server went on serving another file. The error says what was put
// back and whether the server is seen serving it.
var ErrRefused = errors.New("the server did not take the new accounts config")

// ErrAtNextStart is atNextStart's answer: nothing serves the file yet, so there is nothing
// to prove until the embedded bus starts and reads it.
var ErrAtNextStart = errors.New("the embedded bus is not running; it reads the accounts config when it starts")

// A mesh on a cluster. Each server of a cluster reads and reloads its own accounts config —
// nothing propagates one — so an accounts change rolls through the servers one at a time,
// each written, checked, reloaded and proven by a login as the generation principal on that
// server alone (its own Target, never the cluster's pool, which could answer from another).
// A server that refuses its file stops the roll: it and every server changed before it go
// back to the previous file, each proven again, so the cluster never serves two user sets
// because one server would not take the new one. A server that is down is left as it is and
// named: the others are brought up to date, and the next apply finds it behind and finishes
// the job. A server before its first start — no file of its own yet, nothing listening at its
// address — is not left alone: its config includes the file, so it could never start, and a
// new cluster's first apply writes (and copies) every server's file for that start. The single
// server of bus.url, and the embedded bus, are a cluster of one: the same code, one step.

// ErrServerDown is returned (wrapped) when an accounts change reached every server of a
// cluster but some that did not answer: those are named, with the servers seen serving the
// new config (if any), and the next apply (or watch) brings the rest up to date when they
// are back.
var ErrServerDown = errors.New("some servers of the bus are down")

// write rolls a new accounts config (a rendering) through the servers, one at a time (see
// above). A server of a cluster already seen serving exactly this rendering is left alone,
// so the apply after one that found a server down changes only that server.
func (a File) Write(ctx context.Context, data []byte) error {
	type changed struct {
		s    File
		undo func(context.Context, error) error
	}
	// Asked once, before the first server: a roll begun is finished or undone, never left
	// half done by an owner that just lost its lease.
	if a.Owned != nil {
		if err := a.Owned(); err != nil {
			return fmt.Errorf("the accounts config is left as it is: %w", err)
		}
	}
	// Every server's file first: one open to every user is refused before any server is
	// changed, rather than rolled back from the servers before it.
	for _, s := range a.Servers() {
		if _, err := atomicfile.CheckShared(s.Path); err != nil {
			return fmt.Errorf("the accounts config of %s holds password hashes, and is left as it is: %w", s.name(), err)
		}
	}
	var done []changed
	var down, serving, behind, notLive, notLiveWhy []string
	var firstStarts atFirstStart
	for _, s := range a.Servers() {
		if s.Server != "" {
			serves, err := s.alreadyServes(ctx, data)
			if err != nil && !s.beforeFirstStart() {
				down = append(down, fmt.Sprintf("%s (%v)", s.name(), err))
				behind = append(behind, s.name())
				continue
			}
			if serves {
				serving = append(serving, s.name())
				continue
			}
		}
		undo, err := s.writeServer(ctx, data)
		var first atFirstStart
		switch {
		case err == nil:
			serving = append(serving, s.name())
		case errors.As(err, &first):
			firstStarts = append(firstStarts, first...)
			behind = append(behind, s.name())
		case errors.Is(err, ErrNotLive):
			notLive = append(notLive, s.name())
			behind = append(behind, s.name())
			// Said once for all the servers it holds for: why a reload is the operator's.
			if why := strings.TrimPrefix(err.Error(), ErrNotLive.Error()+": "); why != ErrNotLive.Error() && !slices.Contains(notLiveWhy, why) {
				notLiveWhy = append(notLiveWhy, why)
			}
		case errors.Is(err, ErrAtNextStart):
			return err
		default:
			if len(a.Others) == 0 {
				return err
			}
			errs := []error{fmt.Errorf("%s: %w", s.name(), err)}
			// Newest first, the reverse of the roll: each goes back to what it served before.
			for i := len(done) - 1; i >= 0; i-- {
				c := done[i]
				cause := fmt.Errorf("%s did not take the new config", s.name())
				errs = append(errs, fmt.Errorf("%s, changed before it: %w", c.s.name(), c.undo(ctx, cause)))
			}
			if len(firstStarts) > 0 {
				// Not rolled back: a server not running has nothing else to start on.
				errs = append(errs, firstStarts)
			}
			return errors.Join(errs...)
		}
		if undo != nil {
			done = append(done, changed{s, undo})
		}
	}
	var errs []error
	if len(firstStarts) > 0 {
		errs = append(errs, firstStarts)
	}
	if len(down) > 0 {
		// Only servers seen serving the new config are said to: when none is (every server
		// down, or the rest only written), saying the others serve it would be false.
		others := "no server is seen serving the new one"
		switch len(serving) {
		case 0:
		case 1:
			others = serving[0] + " serves the new one"
		default:
			others = strings.Join(serving, ", ") + " serve the new one"
		}
		errs = append(errs, fmt.Errorf("%w: %s did not answer, and its accounts config was not changed; %s, "+
			"and the next apply brings the rest up to date once they are back", ErrServerDown, strings.Join(down, ", "), others))
	}
	if len(notLive) > 0 {
		what := ""
		if len(a.Others) > 0 {
			what = " on " + strings.Join(notLive, ", ")
		}
		err := fmt.Errorf("%w%s", ErrNotLive, what)
		if len(notLiveWhy) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.Join(notLiveWhy, "; "))
		}
		errs = append(errs, err)
	}
	if len(errs) > 0 && len(serving) > 0 {
		return &PartlyServed{Serving: serving, Behind: behind, err: errors.Join(errs...)}
	}
	return errors.Join(errs...)
}

// write installs a new accounts config (a rendering): stamped with a fresh generation
// principal, checked with the server's own parser, written atomically beside the old one,
// reloaded, and seen served — by a login as that principal, which only this file admits.
// When the server does not take it, the previous file and its generation go back, are
// reloaded, and the error says whether the server is seen serving the previous one.
//
// When the file on disk already is this rendering, as meshctl stamped it, it is not written
// again: a server seen serving it is left alone, and one that is not is reloaded and proven.
//
// On success it returns how to put the previous file back (nil when there is nothing to put
// back): a cluster's rolling change undoes the servers it changed when a later one refuses.
func (a File) writeServer(ctx context.Context, data []byte) (undo func(ctx context.Context, cause error) error, err error) {
	if a.StateDir == "" {
		return nil, errors.New("writing the accounts config: no state directory to keep its generation in")
	}
	dir := filepath.Dir(a.Path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, state.DiskError(fmt.Errorf("creating the directory of the accounts config: %w", err), dir)
	}
	previous, err := os.ReadFile(a.Path)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the accounts config in use: %w", err)
	}
	prevGen, prevRecorded, prevKnown := a.previousGeneration(ctx, previous, existed)
	rendered := digest(data)
	if prevKnown && a.inShape(previous) && sameRendering(prevGen, previous, data, rendered) {
		return nil, a.serveAgain(ctx, prevGen, prevRecorded)
	}
	stamped, gen, err := a.stamp(data, rendered)
	if err != nil {
		return nil, fmt.Errorf("writing the accounts config: %w", err)
	}
	reload, err := a.check(stamped, dir)
	if err != nil {
		return nil, state.DiskError(err, dir)
	}
	// The record first: a crash between the two leaves a record that describes no file on
	// disk, which the next plan reads as "not proven" and repairs, never as proven.
	if err := saveGeneration(a.StateDir, a.Server, gen); err != nil {
		return nil, err
	}
	if err := atomicfile.WriteShared(a.Path, stamped); err != nil {
		werr := state.DiskError(fmt.Errorf("writing the accounts config %s: %w", a.Path, err), dir)
		if rerr := restoreGeneration(a.StateDir, a.Server, prevGen, prevKnown); rerr != nil {
			return nil, errors.Join(werr, rerr)
		}
		return nil, werr
	}
	undo = func(ctx context.Context, cause error) error {
		return a.restore(ctx, cause, previous, existed, prevGen, prevKnown)
	}
	err = a.reloadAndProve(ctx, gen, reload, prevKnown && a.controllerKept(ctx, previous, data, prevGen))
	if err == nil || errors.Is(err, ErrNotLive) || errors.Is(err, ErrAtNextStart) {
		return undo, err
	}
	if errors.Is(err, bus.ErrNotServed) {
		// The process serving the embedded bus stopped meanwhile: no server runs from this
		// state directory, and the next to start reads this file, which its first plan then
		// proves.
		return nil, fmt.Errorf("%w (%w)", ErrAtNextStart, err)
	}
	var notCopied copyError
	if !existed && !errors.As(err, &notCopied) && !listening(a.Target) {
		// A server whose config includes this file cannot start before it exists: the first
		// apply leaves it, and its generation record, for that first start, and the next
		// apply proves it served. Removing it would leave the server unable to start. A file
		// its copy did not put on the server is removed, so the next apply copies it again.
		return nil, atFirstStart{{a, err}}
	}
	return nil, undo(ctx, err)
}

// atFirstStart is the files written for servers that are not running yet, each the only
// way such a server can start: not live, as ErrNotLive says, and nothing for the operator
// to reload. A cluster's first apply names every one of its servers in one error.
type atFirstStart []firstStart

// firstStart is one server's file left for its first start, and how its reload failed
// (nothing accepting a connection at its address, it is taken for not running).
type firstStart struct {
	server File
	cause  error
}

func (e atFirstStart) Is(target error) bool { return target == ErrNotLive }

func (e atFirstStart) Error() string {
	where := func(f firstStart) string {
		if f.server.Copy != nil {
			return f.server.Path + " (copied onto the server by its copy command)"
		}
		return f.server.Path
	}
	if len(e) == 1 {
		f := e[0]
		name := "the server at " + f.server.Target.Address()
		if f.server.Server != "" {
			name = f.server.name()
		}
		return fmt.Sprintf("%s is not answering (%v); the accounts config is left at %s for its first start: "+
			"start the server, whose config includes it, then apply again", name, f.cause, where(f))
	}
	// Each reload failed the same way, on a server not running: the address says enough.
	var names, files []string
	for _, f := range e {
		names = append(names, f.server.name())
		files = append(files, fmt.Sprintf("%s at %s", f.server.name(), where(f)))
	}
	return fmt.Sprintf("%s are not answering (nothing accepts a connection at their addresses); the accounts config of each "+
		"is left for its first start (%s): start every one of them, each of whose configs includes its file, then apply again",
		strings.Join(names, ", "), strings.Join(files, "; "))
}

// listening reports whether anything accepts a TCP connection at t's address: a server not
// running at all, as opposed to one that refused the reload.
func listening(t busclient.Target) bool {
	u, err := url.Parse(t.URL)
	if err != nil || u.Host == "" {
		return true // not known to be down: the file is not left behind on a guess
	}
	c, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// sameRendering reports whether previous, the file g records, was stamped from data, whose
// digest is dataDigest: by the digest g keeps of its rendering where it keeps one, rather than
// by a copy of the file without its stamp.
func sameRendering(g generation, previous, data []byte, dataDigest string) bool {
	if g.Rendered != "" {
		return g.Rendered == dataDigest
	}
	rendered, _ := Unstamp(previous)
	return bytes.Equal(rendered, data)
}

// check parses stamped, the file about to be written, with the server's own parser, and
// returns the reload that makes it live. The stamped text is what the server will read: the
// generation principal goes in ahead of the last lines, so a line the parser names is still the
// rendering's. A reloader that checks with its server's own settings (the embedded bus in this
// process) keeps the parse for the reload, so the change costs one parse of the whole config.
func (a File) check(stamped []byte, dir string) (reload func(ctx context.Context) error, err error) {
	if a.AccountOnly {
		// Checked in the context the server reads it in: inside an accounts block.
		stamped = render.WithinAccounts(stamped)
	}
	if c, ok := a.Reloader.(bus.AccountsChecker); ok {
		return c.CheckAccounts(stamped)
	}
	if err := bus.CheckAccounts(stamped, dir); err != nil {
		return nil, err
	}
	return a.Reloader.Reload, nil
}

// reloadAgain reloads a file that is already on disk as meshctl wrote it, and proves it.
func (a File) reloadAgain(ctx context.Context, g generation) error {
	err := a.reloadAndProve(ctx, g, a.Reloader.Reload, false)
	if err == nil || errors.Is(err, ErrNotLive) || errors.Is(err, ErrAtNextStart) {
		return err
	}
	return fmt.Errorf("%w: %w; the accounts config at %s is the one meshctl wrote, and the server still serves another: "+
		"its log says why it does not load it", ErrRefused, err, a.Path)
}

// reloadAndProve copies the file onto the server where it is not on the control host, reloads
// the server with reload and waits until it is seen serving g's file. admitted is Verify's.
func (a File) reloadAndProve(ctx context.Context, g generation, reload func(ctx context.Context) error, admitted bool) error {
	if err := a.copyFile(ctx); err != nil {
		return err
	}
	if err := reload(ctx); err != nil {
		return err
	}
	if err := prove(ctx, a.Target, g, ProofWait); err != nil {
		if errors.Is(err, errNotServed) {
			return fmt.Errorf("%w of the reload (a reload the server refused says why in its log, "+
				"e.g. \"config reload not supported for ServerName\")", err)
		}
		return fmt.Errorf("proving the server loaded it: %w", err)
	}
	if a.Verify != nil {
		return a.Verify(ctx, admitted)
	}
	return nil
}

// controllerKept reports whether the rendering data keeps the controller's entry of the
// previous file byte for byte, and the server is seen serving that previous file, its
// generation prevGen: then what let the controller in before lets it in after. Only for a
// single server — on a cluster the controller's connection may be to another server than
// the one reloaded.
func (a File) controllerKept(ctx context.Context, previous, data []byte, prevGen generation) bool {
	if a.Server != "" {
		return false
	}
	// Read in the file as it stands: its stamp adds a line before the users and an entry after
	// them, and changes none.
	entry := render.EntryOf(data, render.ControllerUser)
	return entry != nil && bytes.Equal(entry, render.EntryOf(previous, render.ControllerUser)) &&
		proveOnce(ctx, a.Target, prevGen) == nil
}

// restore puts the previous accounts config back after the server did not take the new one
// (cause), reloads it, and returns an error saying exactly what is on disk and whether the
// server is seen serving it.
func (a File) restore(ctx context.Context, cause error, previous []byte, existed bool, prevGen generation, prevKnown bool) error {
	// The previous file goes back even when the apply was interrupted or ran out of time:
	// a bus left on a file nobody vouches for is worse than a restore that takes a moment.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*ProofWait)
	defer cancel()
	var werr error
	if existed {
		werr = atomicfile.WriteShared(a.Path, previous)
	} else {
		werr = os.Remove(a.Path)
	}
	if werr != nil {
		return fmt.Errorf("%w: %w; putting the previous accounts config back at %s failed too, so the new one stays "+
			"there, not served: %w", ErrRefused, cause, a.Path, state.DiskError(werr, filepath.Dir(a.Path)))
	}
	if gerr := restoreGeneration(a.StateDir, a.Server, prevGen, prevKnown); gerr != nil {
		return fmt.Errorf("%w: %w; the previous accounts config is back at %s, but its generation could not be recorded: %w",
			ErrRefused, cause, a.Path, gerr)
	}
	if !existed {
		return fmt.Errorf("%w: %w; there was no accounts config at %s before, and the new one is removed", ErrRefused, cause, a.Path)
	}
	// Reloaded even when the new file was never taken: a server that took it late, after the
	// proof gave up, goes back to the previous one.
	rerr := a.copyFile(ctx)
	if rerr == nil {
		rerr = a.Reloader.Reload(ctx)
	}
	if !prevKnown {
		if rerr != nil {
			return fmt.Errorf("%w: %w; the previous accounts config is back at %s, and reloading it failed too (%v); "+
				"it carries no generation of meshctl's, so which config the server serves is not known", ErrRefused, cause, a.Path, rerr)
		}
		return fmt.Errorf("%w: %w; the previous accounts config is back at %s and reloaded; it carries no generation "+
			"of meshctl's, so that the server serves it is not proven", ErrRefused, cause, a.Path)
	}
	if perr := prove(ctx, a.Target, prevGen, ProofWait); perr != nil {
		reload := ""
		if rerr != nil {
			reload = fmt.Sprintf(" (reloading it failed too: %v)", rerr)
		}
		return fmt.Errorf("%w: %w; the previous accounts config is back at %s%s, but the server is not seen serving it either "+
			"(%v): reload the server and check its log, then apply again", ErrRefused, cause, a.Path, reload, perr)
	}
	// The server serves the previous file: whatever the reload of it said, the bus is as it
	// was before this apply's accounts change.
	return fmt.Errorf("%w: %w; the previous accounts config is back at %s and the server is seen serving it, "+
		"so its users are as they were", ErrRefused, cause, a.Path)
}

// copyFile puts the file at Path onto the server, when the server is not on the control host.
func (a File) copyFile(ctx context.Context) error {
	if a.Copy == nil {
		return nil
	}
	if err := a.Copy(ctx, a.Path); err != nil {
		return copyError{err}
	}
	return nil
}

// copyError is a copy command's failure: the file on the control host did not reach the
// server.
type copyError struct{ err error }

func (e copyError) Error() string { return e.err.Error() }
func (e copyError) Unwrap() error { return e.err }

// restoreGeneration puts the previous generation record back, or removes the record when the
// previous file carried none of meshctl's.
func restoreGeneration(stateDir, server string, prev generation, known bool) error {
	if !known {
		prev = generation{}
	}
	return saveGeneration(stateDir, server, prev)
}

// install writes a rendering, stamped, where no server reads it yet: the embedded bus's
// first config, read when it starts. Starting proves nothing by itself; the first plan's
// login as its generation principal does.
func (a File) Install(data []byte) error {
	stamped, gen, err := a.stamp(data, digest(data))
	if err != nil {
		return fmt.Errorf("writing the first accounts config: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(a.Path), 0o700); err != nil {
		return state.DiskError(fmt.Errorf("writing the first accounts config: %w", err), filepath.Dir(a.Path))
	}
	if err := saveGeneration(a.StateDir, a.Server, gen); err != nil {
		return err
	}
	if err := atomicfile.Write(a.Path, stamped); err != nil {
		return state.DiskError(fmt.Errorf("writing the first accounts config %s: %w", a.Path, err), filepath.Dir(a.Path))
	}
	return nil
}

// servedServer reads one server's accounts config on disk back as a plan compares it: without its
// generation principal, and with the reason the server is not known to serve it ("" when it
// is seen serving exactly this file). It costs one login, as the generation principal,
// whose hash is the cheapest bcrypt.
func (a File) servedServer(ctx context.Context, conf []byte) ([]byte, string, error) {
	rendered, stamped := Unstamp(conf)
	if !stamped && a.AccountOnly {
		// The operator's own first file of the account, read as the server reads it.
		rendered = render.WithinAccounts(rendered)
	}
	g, recorded, known := a.generationOf(conf, rendered, stamped)
	switch {
	case !a.inShape(conf):
		return rendered, a.notInShape(), nil
	case !known && stamped:
		return rendered, fmt.Sprintf("the accounts config at %s is not the one meshctl last wrote (edited by hand?); "+
			"it is written and reloaded again", a.Path), nil
	case !known:
		return rendered, fmt.Sprintf("the accounts config at %s carries no generation meshctl recorded, "+
			"so that the server serves it is not known; it is written and reloaded, and then proven", a.Path), nil
	}
	notServed, err := a.serving(ctx, g)
	if err != nil {
		return nil, "", err
	}
	if notServed != "" && !recorded {
		notServed = fmt.Sprintf("the server is not seen serving the accounts config at %s as this store stamps it "+
			"(not loaded, edited by hand, or stamped by an earlier meshctl); it is written and reloaded again", a.Path)
	}
	return rendered, notServed, nil
}

// ServedAsRendered is served for a plan whose target's rendering has the digest want gives,
// reading the file only through its digest. When the file is the one meshctl last wrote (its
// digest is the generation record's) and was stamped from that very rendering (the record's
// Rendered), the plan needs nothing of it — it is the rendering — and only whether the server
// serves it is found out, as served finds it. ok is false where that is not known so: a
// cluster, whose servers each serve a file of their own; no record of this file, or one kept
// before records named their rendering; a file of another rendering. The caller then reads
// the file whole. Only when the target is the rendering is want asked.
func (a File) ServedAsRendered(ctx context.Context, want func() string) (notServed string, ok bool, err error) {
	if len(a.Others) > 0 || want == nil {
		return "", false, nil
	}
	g, known := loadGeneration(a.StateDir, a.Server)
	if !known || g.Rendered == "" || g.AccountOnly != a.AccountOnly {
		return "", false, nil
	}
	sum, exists, err := FileDigest(a.Path)
	if err != nil || !exists || !g.describesDigest(a.Path, sum) || want() != g.Rendered {
		return "", false, nil
	}
	notServed, err = a.serving(ctx, g)
	return notServed, true, err
}

// serving proves, with one login as g's generation principal, that the server serves the file
// g records; notServed says why it is not seen to ("" when it is).
func (a File) serving(ctx context.Context, g generation) (notServed string, err error) {
	err = proveOnce(ctx, a.Target, g)
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, errNotServed):
		return fmt.Sprintf("the server does not serve the accounts config at %s: meshctl wrote it, and the server "+
			"has not loaded it (a reload it refused, or one left to the operator)", a.Path), nil
	default:
		return "", fmt.Errorf("seeing which accounts config the server serves: %w", err)
	}
}

// RemoveStaleChecks removes what a killed run left beside the accounts file: the temporary
// directories of its config check, each a copy of every password hash. It runs under the
// apply lock, and leaves alone a check a live process is still making.
func RemoveStaleChecks(path string, logf func(string, ...any)) {
	removed, err := bus.RemoveStaleChecks(filepath.Dir(path))
	for _, r := range removed {
		logf("removed %s, a copy of the accounts config a killed meshctl left behind", r)
	}
	if err != nil {
		logf("%v", err)
	}
}
