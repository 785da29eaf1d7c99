package main

import (
	"fmt"
	"io"
	"time"

	"github.com/meshbus/meshctl/render"
)

// The bounds on what a user waits for, at 5,000 instances (and 20,000 for the
// first apply with watch serving).
const (
	oneShotBound     = 1.5                    // one-shot first apply / create floor
	convergedBound   = 1.3                    // converged diff and apply / paged-list floor
	oneChangeSlack   = 500 * time.Millisecond // one change ≤ converged apply + this
	healBound        = 2 * time.Second        // a consumer deleted by hand, back
	watchApplyBound  = 1.3                    // first apply with watch serving / served create floor, at 20,000
	watchApplyAtSize = 20000
	// On an external server with the store on the bus, a converged apply and one change are
	// held to the same rows on the embedded bus: the lock, the fence and the writes to the
	// bucket must cost no more than this on top.
	externalBound = 1.1
)

// waitRow is one line of the user-wait table: a measured row, the floor or baseline it is
// held to, and the bound.
type waitRow struct {
	title string
	id    string
	floor string // the row it is compared with; "" for none
	delta bool   // compared by difference, not ratio
	// check says whether the row meets its bound at that size, and the bound as written;
	// nil when no bound applies.
	check func(w *waitResult) (ok, applies bool, bound string)
}

func ratioCheck(id, floor string, bound float64, at int) func(w *waitResult) (bool, bool, string) {
	return func(w *waitResult) (bool, bool, string) {
		a, f := w.rows[id], w.rows[floor]
		if a == nil || f == nil || f.median() == 0 {
			return false, false, ""
		}
		return float64(a.median())/float64(f.median()) <= bound, w.size == at, fmt.Sprintf("≤ %.1f× at %s", bound, num(at))
	}
}

var waitRows = []waitRow{
	{"one-shot first apply on the embedded default, total wait", wOneShot, wFloorCreate, false, ratioCheck(wOneShot, wFloorCreate, oneShotBound, referenceSize)},
	{"– of which the embedded server's stop (from \"applied\" to the exit)", wOneShotStop, "", false, nil},
	{"first apply with `watch` serving the bus", wWatchApply, wFloorServed, false, ratioCheck(wWatchApply, wFloorServed, watchApplyBound, watchApplyAtSize)},
	{"– the same, against the floor whose client and bus share one process", wWatchApply, wFloorCreate2, false, nil},
	{"converged diff, `watch` serving", wDiff, wFloorList, false, ratioCheck(wDiff, wFloorList, convergedBound, referenceSize)},
	{"converged apply, `watch` serving (nothing to change: no mutating call)", wApply, wFloorList, false, ratioCheck(wApply, wFloorList, convergedBound, referenceSize)},
	{"one change: one module follows one more event (and back)", wOneChange, wApply, true, func(w *waitResult) (bool, bool, string) {
		a, c := w.rows[wOneChange], w.rows[wApply]
		if a == nil || c == nil {
			return false, false, ""
		}
		return a.median() <= c.median()+oneChangeSlack, w.size == referenceSize, fmt.Sprintf("≤ converged apply + %s at %s", oneChangeSlack, num(referenceSize))
	}},
	{"a consumer deleted by hand, recreated by the running `watch`", wHeal, "", false, func(w *waitResult) (bool, bool, string) {
		h := w.rows[wHeal]
		if h == nil {
			return false, false, ""
		}
		return h.median() <= healBound, w.size == referenceSize, fmt.Sprintf("≤ %s at %s", healBound, num(referenceSize))
	}},
	{"floor: bare client creates every object, 16 in flight (beside the one-shot runs)", wFloorCreate, "", false, nil},
	{"floor: the same, beside the runs with `watch` serving", wFloorCreate2, "", false, nil},
	{"floor: the same on a bus another process serves, as `watch` does (beside the runs with `watch` serving)", wFloorServed, "", false, nil},
	{"floor: bare client lists every object in pages, on `watch`'s bus as the controller", wFloorList, "", false, nil},
}

// externalRows are the rows on an external server, the store on the bus, each compared with
// the same row on the embedded bus.
var externalRows = []waitRow{
	{"converged diff", wExtDiff, wDiff, false, nil},
	{"converged apply (nothing to change: no mutating call; the apply lock taken on the bus)", wExtApply, wApply, false, ratioCheck(wExtApply, wApply, externalBound, referenceSize)},
	{"one change: one module follows one more event (and back)", wExtOneChange, wOneChange, false, ratioCheck(wExtOneChange, wOneChange, externalBound, referenceSize)},
	{"floor: bare client lists every object in pages, on the server as the controller", wExtFloorList, wFloorList, false, nil},
}

// has reports whether any of rows was measured.
func (w *waitResult) has(rows []waitRow) bool {
	for _, row := range rows {
		if s := w.rows[row.id]; s != nil && len(s.times) > 0 {
			return true
		}
	}
	return false
}

func (r *report) writeWaits(p *printer) {
	if len(r.waits) == 0 {
		return
	}
	p.f("## What a user waits for\n\n")
	p.f("Whole `meshctl` processes — the binary built from this commit, timed from the exec to the exit — as a user runs them, "+
		"each row run %d times, every meshctl run interleaved with the run of the bare-client floor it is compared with. "+
		"The time is the median, with the fastest and the slowest run; the peak RSS is the highest of the row's processes "+
		"(VmHWM, read while each ran). The ratio is the row's median over its floor's.\n\n", r.plan.runs)
	for _, w := range r.waits {
		m := r.meshes[w.size]
		p.f("### %s module instances (%s streams, %s consumers, %s principals)\n\n", num(w.size), num(m.streams), num(m.consumers), num(m.principals))
		if w.has(waitRows) {
			writeWaitTable(p, w, waitRows)
		}
		if w.has(externalRows) {
			p.f("**On an external nats-server, the store on the bus**: the same mesh on a nats-server process of its own, " +
				"each row compared with the same row on the embedded bus above.\n\n")
			writeWaitTable(p, w, externalRows)
		}
	}
	r.writeLargeChecks(p)
	p.f("%s", waitHow)
}

// The bounds at the largest size: memory proportional to what changes, not to the mesh.
const (
	largeSize     = 20000
	largeRSSBound = 120_000_000 // peak RSS of a converged diff or apply: 120 MB, as megabytes prints it
)

// writeLargeChecks holds the converged rows at largeSize to their bounds, when measured.
func (r *report) writeLargeChecks(p *printer) {
	var w *waitResult
	for _, x := range r.waits {
		if x.size == largeSize {
			w = x
		}
	}
	if w == nil || w.rows[wDiff] == nil || w.rows[wApply] == nil || w.rows[wFloorList] == nil {
		return
	}
	diff, apply, floor, one := w.rows[wDiff], w.rows[wApply], w.rows[wFloorList], w.rows[wOneChange]
	p.f("**At %s instances**, the converged rows against their bounds:\n\n| check | measured | |\n|---|---|---|\n", num(largeSize))
	for _, c := range []struct {
		name string
		s    *series
	}{{"converged diff", diff}, {"converged apply", apply}} {
		p.f("| %s: peak RSS ≤ %s | %s | %s |\n", c.name, megabytes(largeRSSBound), megabytes(c.s.peak()), verdict(c.s.peak() <= largeRSSBound))
		ratio := float64(c.s.median()) / float64(floor.median())
		p.f("| %s ≤ %.1f× the paged-list floor | %s against %s (%.2f×) | %s |\n", c.name, convergedBound, duration(float64(c.s.median())),
			duration(float64(floor.median())), ratio, verdict(ratio <= convergedBound))
	}
	if one != nil {
		p.f("| one change ≤ converged apply + %s | %s against %s (+%s) | %s |\n", oneChangeSlack, duration(float64(one.median())),
			duration(float64(apply.median())), duration(float64(one.median()-apply.median())), verdict(one.median() <= apply.median()+oneChangeSlack))
	}
	p.f("\n")
}

// writeWaitTable writes the measured rows of w among rows as one table.
func writeWaitTable(p *printer, w *waitResult, rows []waitRow) {
	p.f("| | median | fastest – slowest | peak RSS | compared with | ratio | bound | |\n|---|---:|---:|---:|---|---:|---|---|\n")
	for _, row := range rows {
		s := w.rows[row.id]
		if s == nil || len(s.times) == 0 {
			continue
		}
		lo, hi := s.spread()
		rss := ""
		if s.peak() > 0 {
			rss = megabytes(s.peak())
		}
		against, ratio := "", ""
		if f := w.rows[row.floor]; f != nil && f.median() > 0 {
			against = fmt.Sprintf("%s (%s)", waitTitle(row.floor), duration(float64(f.median())))
			ratio = compare(row, s, f)
		}
		bound, verdictCell := "", ""
		if row.check != nil {
			if ok, applies, b := row.check(w); b != "" {
				bound = b
				if applies {
					verdictCell = verdict(ok)
				}
			}
		}
		p.f("| %s | %s | %s – %s | %s | %s | %s | %s | %s |\n", row.title, duration(float64(s.median())), duration(float64(lo)), duration(float64(hi)),
			rss, against, ratio, bound, verdictCell)
	}
	p.f("\n")
}

// compare is a row's median against its floor's: a ratio, or a difference for a row bounded
// by one.
func compare(row waitRow, s, f *series) string {
	if row.delta {
		d := s.median() - f.median()
		if d < 0 {
			return "−" + duration(float64(-d))
		}
		return "+" + duration(float64(d))
	}
	return fmt.Sprintf("%.2f×", float64(s.median())/float64(f.median()))
}

// waitTitle names a row briefly, as the "compared with" column does.
func waitTitle(id string) string {
	switch id {
	case wFloorCreate, wFloorCreate2:
		return "create floor"
	case wFloorServed:
		return "served create floor"
	case wFloorList:
		return "paged-list floor"
	case wApply:
		return "converged apply"
	case wDiff:
		return "converged diff"
	case wOneChange:
		return "one change"
	}
	return id
}

// printWaits writes the user-wait medians as the harness finishes them, for the terminal.
func printWaits(w io.Writer, waits []*waitResult) {
	for _, res := range waits {
		fmt.Fprintf(w, "what a user waits for at %s instances (median, fastest – slowest, peak RSS):\n", num(res.size))
		printWaitRows(w, res, waitRows, "")
		if res.has(externalRows) {
			fmt.Fprintf(w, "  on an external nats-server, the store on the bus (compared with the embedded bus's):\n")
			printWaitRows(w, res, externalRows, "  ")
		}
	}
}

func printWaitRows(w io.Writer, res *waitResult, rows []waitRow, indent string) {
	for _, row := range rows {
		s := res.rows[row.id]
		if s == nil || len(s.times) == 0 {
			continue
		}
		lo, hi := s.spread()
		line := fmt.Sprintf("  %s%-*s %9s  (%s – %s)", indent, 84-len(indent), row.title, duration(float64(s.median())), duration(float64(lo)), duration(float64(hi)))
		if s.peak() > 0 {
			line += "  " + megabytes(s.peak())
		}
		if f := res.rows[row.floor]; f != nil && f.median() > 0 {
			line += fmt.Sprintf("  %s the %s", compare(row, s, f), waitTitle(row.floor))
		}
		fmt.Fprintln(w, line)
	}
}

const waitHow = `How these rows were measured:

- **One-shot first apply**: ` + "`meshctl apply -f DIR --state S`" + ` from an empty state directory, each run a fresh one, on the
  embedded default (the bus section names only ` + "`listen`" + `): the process starts the bus, mints the controller's
  credential, applies, and stops the bus. The stop is the time from its "applied N change(s)" line on stderr to its exit.
- **With ` + "`watch`" + ` serving**: ` + "`meshctl watch --debounce 1h --resync 1h`" + ` runs on a directory holding the bus section and one node;
  the whole mesh is written into it and ` + "`meshctl apply`" + ` on it is timed: the apply finds watch's bus through the state
  directory, applies, and has watch reload the bus over its control socket, which starts no reconcile of watch's. The
  long debounce keeps watch from applying the written files itself. Each first-apply run has a watch of its own,
  killed once the apply is timed and before the floors run (the advisories of the apply's two stream updates would
  have it reconcile the whole mesh beside them); a watch started on the last run's store serves every row after.
  This row is held to the served create floor: meshctl's apply is a client of a bus another process serves, and a
  bare client in that position is slower than one sharing its process with the bus (the row after says by how much).
- **Converged diff and apply**: ` + "`meshctl diff`" + ` and ` + "`meshctl apply`" + ` on the applied mesh. The apply must say "the bus was already in
  sync" (its plan is empty, so it makes no mutating call) and must not make watch reconcile (it wrote no accounts config).
- **One change**: the description edited so that one single-node module follows one more event, applied, then edited back
  and applied, in turn: one consumer update and the accounts config with one user's grants changed, reloaded through watch's control socket.
- **A consumer deleted by hand**: as the controller, a bare client deletes one module's consumer on EVENTS (a different
  one each run) and polls every 10 ms until it exists again: watch hears the server's advisory and recreates it.
- **The floors** run in processes of their own: the create floor starts an embedded bus configured as meshctl's (the
  MESH account, one unrestricted user) and times creating the mesh's streams, then its consumers, 16 calls in flight;
  the served create floor does the same on such a bus served by another floor process, started before it and killed
  after;
  the paged-list floor connects to watch's bus as the controller and lists every stream and every stream's consumers,
  page after page, 16 streams at a time. Their times are their processes' too, from the exec to the exit, as meshctl's
  are (the harness's log shows the operation alone beside each); the create floor's process exits without stopping its
  bus.
- **On an external nats-server, the store on the bus**: the nats-server binary built from the module's pinned version (the
  release the embedded bus links) runs as a process of its own, started as meshctl's tests start an operator's server
  (` + "`bustest.StartTestServer`" + `): TLS with a self-signed certificate the mesh pins, a pid file, and the accounts file meshctl
  writes included. The bus section names its URL, fingerprint, accounts file and ` + "`reload: { pid_file }`" + `, so meshctl keeps
  its state store on that bus: every change of the store is written to the KV bucket ` + "`" + render.StateBucket + "`" + `, and every
  apply takes the apply lock in ` + "`" + render.LeaseBucket + "`" + ` and reads the store's fence. No ` + "`watch`" + ` runs: the server serves
  itself, and each row is a one-shot ` + "`meshctl apply`" + ` or ` + "`diff`" + ` on one state directory. Its first apply, from an empty
  state directory, is the rows' setup and is not reported. The converged diff and the paged-list floor (over TLS, as
  the controller) are interleaved as on the embedded bus; the converged apply must also leave the accounts file
  unwritten (no reload) and take the lock on the bus (the lease bucket's stream grows), and so must each apply of one
  change, whose reload is a SIGHUP to the pid in the pid file. These rows run after the embedded bus's, not
  interleaved with them, and are compared with them by their medians.
- Every timed create starts from a flushed filesystem (` + "`sync`" + `). No store is removed until the bench ends: each
  finished run's is put aside, because on ext4 without a journal the inode allocator skips every inode freed in the
  last minute or more, and a run started right after its predecessor's hundred thousand files were removed paid for
  it (three times the system time, at 20,000 instances).

`
