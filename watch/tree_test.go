package watch

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshbus/meshctl/internal/lockedbuf"
)

// treeProbe runs a treeWatcher on a directory of the test's own and collects what it
// reports, in order.
type treeProbe struct {
	t     *testing.T
	dir   string
	paths chan string
	log   *lockedbuf.Buffer
}

func startTreeProbe(t *testing.T, setup func(dir string), add addWatchFunc) *treeProbe {
	t.Helper()
	p := &treeProbe{t: t, dir: t.TempDir(), paths: make(chan string, 1000), log: &lockedbuf.Buffer{}}
	if setup != nil {
		setup(p.dir)
	}
	logger := slog.New(slog.NewTextHandler(p.log, nil))
	w, err := startTreeWatcher(p.dir, 20*time.Millisecond, logger, add, func(path string) { p.paths <- path })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return p
}

// next returns the next reported path that is none of skip (the paths of the operation
// before, which may report more than once: a create, then a write).
func (p *treeProbe) next(skip ...string) string {
	p.t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		select {
		case got := <-p.paths:
			rel, _ := filepath.Rel(p.dir, got)
			rel = filepath.ToSlash(rel)
			if !contains(skip, rel) {
				return rel
			}
		case <-deadline.C:
			p.t.Fatalf("nothing reported after %s", waitLimit)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s || strings.HasPrefix(s, x+"/") {
			return true
		}
	}
	return false
}

func (p *treeProbe) path(rel string) string { return filepath.Join(p.dir, filepath.FromSlash(rel)) }

// Each step does what must not be reported, then one thing that must: the first report
// after it names the latter, or the watcher reported what it should have ignored.
func TestTheTreeWatcherReportsWhatLoadReadsAndNothingElse(t *testing.T) {
	t.Parallel()
	p := startTreeProbe(t, func(dir string) {
		writeFile(t, filepath.Join(dir, ".git", "config.yaml"), "not: the mesh\n")
		writeFile(t, filepath.Join(dir, "mesh.yaml"), "nodes: []\n")
		writeFile(t, filepath.Join(dir, "seats.yaml"), "seats: []\n")
	}, fsnotifyAdd)

	writeFile(t, p.path(".git/config.yaml"), "still: not the mesh\n") // in a hidden directory
	writeFile(t, p.path("README.md"), "# not a description file\n")   // not YAML
	writeFile(t, p.path(".mesh.yaml.swp"), "an editor's swap file\n") // hidden
	writeFile(t, p.path("mesh.yaml~"), "an editor's backup\n")        // not .yaml
	if err := os.Chmod(p.path("mesh.yaml"), 0o600); err != nil {      // attributes only
		t.Fatal(err)
	}
	if err := os.Mkdir(p.path("empty"), 0o755); err != nil { // a directory with nothing to load
		t.Fatal(err)
	}
	writeFile(t, p.path("mesh.yaml"), "nodes: [{name: one}]\n")
	if got := p.next(); got != "mesh.yaml" {
		t.Fatalf("first report %q; want mesh.yaml", got)
	}

	// A file in the directory made after the watcher started: it is watched too.
	writeFile(t, p.path("empty/seats.yaml"), "seats: []\n")
	if got := p.next("mesh.yaml"); got != "empty/seats.yaml" {
		t.Fatalf("report %q; want empty/seats.yaml", got)
	}

	// A tree made at once (mkdir -p, a checkout): reported by its new watch or by the scan
	// that follows setting it up, whichever sees the file first.
	writeFile(t, p.path("deep/er/still/nodes.yaml"), "nodes: []\n")
	if got := p.next("empty"); !strings.HasPrefix(got, "deep") {
		t.Fatalf("report %q; want one under deep/", got)
	}

	writeFile(t, p.path("empty/.hidden/x.yaml"), "x: 1\n") // a new hidden directory
	// An editor's save by rename: the temporary file is hidden, the rename lands the name.
	writeFile(t, p.path("empty/.seats.yaml.tmp"), "seats: [{name: mailer}]\n")
	if err := os.Rename(p.path("empty/.seats.yaml.tmp"), p.path("empty/seats.yaml")); err != nil {
		t.Fatal(err)
	}
	if got := p.next("deep"); got != "empty/seats.yaml" {
		t.Fatalf("report %q; want empty/seats.yaml after the save by rename", got)
	}

	// A directory removed, files and all.
	if err := os.RemoveAll(p.path("deep")); err != nil {
		t.Fatal(err)
	}
	if got := p.next("empty/seats.yaml"); !strings.HasPrefix(got, "deep") {
		t.Fatalf("report %q; want one under deep/ for its removal", got)
	}
}

func TestTheTreeWatcherPollsWhenInotifyRunsOutOfWatches(t *testing.T) {
	t.Parallel()
	// The root gets its watch; the next directory finds the machine's limit reached.
	outOfWatchesBelowRoot := func(w *fsnotify.Watcher, dir string) error {
		if filepath.Base(dir) == "sub" {
			return syscall.ENOSPC
		}
		return w.Add(dir)
	}
	p := startTreeProbe(t, nil, outOfWatchesBelowRoot)

	if err := os.Mkdir(p.path("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Whatever changed while the watches failed went unseen: the whole tree is reported.
	if got := p.next(); got != "." {
		t.Fatalf("report %q on falling back; want the whole tree (.)", got)
	}
	if log := p.log.String(); !strings.Contains(log, "inotify ran out of watches") || !strings.Contains(log, "polling") {
		t.Errorf("the log does not say it fell back to polling:\n%s", log)
	}

	// From now on a scan sees changes, in the directory inotify never watched too, and
	// still ignores what Load would not read.
	writeFile(t, p.path("sub/.hidden/x.yaml"), "x: 1\n")
	writeFile(t, p.path("notes.txt"), "not YAML\n")
	writeFile(t, p.path("sub/nodes.yaml"), "nodes: []\n")
	if got := p.next(); got != "sub/nodes.yaml" {
		t.Fatalf("report %q from polling; want sub/nodes.yaml", got)
	}
	writeFile(t, p.path("sub/nodes.yaml"), "nodes: [{name: one}]\n")
	if got := p.next(); got != "sub/nodes.yaml" {
		t.Fatalf("report %q for the edit; want sub/nodes.yaml", got)
	}
	if err := os.Remove(p.path("sub/nodes.yaml")); err != nil {
		t.Fatal(err)
	}
	if got := p.next(); got != "sub/nodes.yaml" {
		t.Fatalf("report %q for the removal; want sub/nodes.yaml", got)
	}
}

func TestTheTreeWatcherFollowsARootThatIsASymlink(t *testing.T) {
	t.Parallel()
	release := t.TempDir()
	writeFile(t, filepath.Join(release, "sub", "mesh.yaml"), "nodes: []\n")
	p := startTreeProbe(t, func(dir string) {
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(release, dir); err != nil {
			t.Fatal(err)
		}
	}, fsnotifyAdd)
	writeFile(t, p.path("sub/mesh.yaml"), "nodes: [{name: one}]\n")
	if got := p.next(); got != "sub/mesh.yaml" {
		t.Fatalf("report %q; want sub/mesh.yaml, in the directory the symlink names", got)
	}
}
