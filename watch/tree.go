package watch

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshbus/meshctl/model"
)

// addWatchFunc adds an inotify watch on one directory.
type addWatchFunc func(w *fsnotify.Watcher, dir string) error

func fsnotifyAdd(w *fsnotify.Watcher, dir string) error { return w.Add(dir) }

// outOfWatches reports whether inotify refused for lack of watches (ENOSPC from
// inotify_add_watch: fs.inotify.max_user_watches) or of instances (EMFILE from
// inotify_init: fs.inotify.max_user_instances). Both are a machine's limits, not a fault
// of the tree, and polling works within them.
func outOfWatches(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EMFILE)
}

// treeWatcher notices changes to the description under root: inotify on every directory
// that model.Load reads (new ones included), or, once inotify runs out of watches, a scan
// of sizes and modification times every poll interval. It reports only what Load would
// see — description files outside hidden directories — and only that something changed:
// the loop reloads the whole tree anyway.
type treeWatcher struct {
	root     string
	poll     time.Duration
	log      *slog.Logger
	addWatch addWatchFunc
	notify   func(path string)

	fsw  *fsnotify.Watcher // nil once polling
	dirs map[string]bool   // directories under an inotify watch
	snap map[string]stamp  // polling: the description files at the last scan
}

// stamp is what a poll compares: a save changes the size or the modification time.
type stamp struct {
	size  int64
	mtime time.Time
}

// startTreeWatcher sets up every watch before it returns, so that no change made after Run
// has started is missed; run then reports changes until its context ends.
func startTreeWatcher(root string, poll time.Duration, log *slog.Logger, add addWatchFunc, notify func(string)) (*treeWatcher, error) {
	w := &treeWatcher{root: filepath.Clean(root), poll: poll, log: log, addWatch: add, notify: notify, dirs: map[string]bool{}}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		if !outOfWatches(err) {
			return nil, err
		}
		w.startPolling(err)
		return w, nil
	}
	w.fsw = fsw
	if _, err := w.addTree(w.root); err != nil {
		fsw.Close()
		w.fsw = nil
		if !outOfWatches(err) {
			return nil, err
		}
		w.startPolling(err)
	}
	return w, nil
}

// mode says how the tree is watched, for the log.
func (w *treeWatcher) mode() string {
	if w.fsw == nil {
		return "polling every " + w.poll.String()
	}
	return "inotify"
}

// run reports changes until ctx ends, switching to polling when inotify fails it. It owns
// the watcher: nothing else may touch it once run has started.
func (w *treeWatcher) run(ctx context.Context) {
	for w.fsw != nil {
		select {
		case <-ctx.Done():
			w.fsw.Close()
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return // closed under us: nothing more will come
			}
			w.handle(ev)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were dropped: something changed, and nobody can say what.
				w.notify(w.root)
				continue
			}
			w.log.Warn("watching the description", "error", err)
		}
	}
	ticker := time.NewTicker(w.poll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			snap := w.scan()
			if path := firstDifference(w.snap, snap); path != "" {
				w.snap = snap
				w.notify(path)
			}
		}
	}
}

func (w *treeWatcher) handle(ev fsnotify.Event) {
	if ev.Op == fsnotify.Chmod {
		return // attributes only: the content Load reads is the same
	}
	path := filepath.Clean(ev.Name)
	if path == w.root {
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			// Its watch went with it; a scan still sees the directory if it comes back.
			w.startPolling(errors.New("the watched directory was removed or renamed"))
		}
		return
	}
	if underHiddenDir(w.root, path) {
		return
	}
	name := filepath.Base(path)
	if ev.Has(fsnotify.Create) {
		if info, err := os.Lstat(path); err == nil && info.IsDir() {
			if strings.HasPrefix(name, ".") {
				return
			}
			// A directory made or moved in: watch it and everything under it, and count it
			// a change only if it brings description files.
			found, err := w.addTree(path)
			switch {
			case outOfWatches(err):
				w.startPolling(err)
			case err != nil:
				w.log.Warn("watching a new directory of the description", "dir", path, "error", err)
				w.notify(path)
			case found:
				w.notify(path)
			}
			return
		}
	}
	if (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) && w.dirs[path] {
		// The files under it are gone from the tree, whatever they were.
		w.forget(path)
		w.notify(path)
		return
	}
	if model.IsDescriptionFile(name) {
		w.notify(path)
	}
}

// underHiddenDir reports whether path lies in a hidden directory under root, as .git does:
// model.Load skips those.
func underHiddenDir(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return false
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	for _, p := range parts[:len(parts)-1] {
		if strings.HasPrefix(p, ".") {
			return true
		}
	}
	return false
}

// addTree watches dir and every directory under it that Load reads, and reports whether
// it holds any description file. Each directory is watched before it is listed, so a file
// created meanwhile is either listed or reported by its watch.
func (w *treeWatcher) addTree(dir string) (found bool, err error) {
	err = walkTree(dir, func(path string, d fs.DirEntry) error {
		if d.IsDir() {
			if err := w.addWatch(w.fsw, path); err != nil {
				return err
			}
			w.dirs[path] = true
			return nil
		}
		found = true
		return nil
	})
	return found, err
}

// forget drops dir and the directories under it. A deleted directory's watch is gone
// already; a renamed one's would report under the old name, so it is removed too, and the
// new name is watched afresh from its Create.
func (w *treeWatcher) forget(dir string) {
	prefix := dir + string(filepath.Separator)
	for d := range w.dirs {
		if d == dir || strings.HasPrefix(d, prefix) {
			_ = w.fsw.Remove(d) // ENOENT/not watched once the kernel dropped it: nothing to do
			delete(w.dirs, d)
		}
	}
}

// startPolling gives up inotify, says so, and scans from now on. Once running, it notifies,
// since whatever changed while the watches were failing went unseen.
func (w *treeWatcher) startPolling(cause error) {
	if outOfWatches(cause) {
		w.log.Warn("inotify ran out of watches (raise fs.inotify.max_user_watches or max_user_instances): polling the description instead",
			"dir", w.root, "every", w.poll, "error", cause)
	} else {
		w.log.Warn("polling the description instead of watching it", "dir", w.root, "every", w.poll, "reason", cause)
	}
	running := w.fsw != nil
	if running {
		w.fsw.Close()
		w.fsw = nil
	}
	w.dirs = nil
	// Scanned before the notice: a change made after the loop hears of it must differ from
	// this scan, or the next poll would miss it.
	w.snap = w.scan()
	if running {
		w.notify(w.root)
	}
}

// scan stamps every description file Load would read. An unreadable tree scans as empty:
// the reconcile that follows reports why.
func (w *treeWatcher) scan() map[string]stamp {
	snap := map[string]stamp{}
	_ = walkTree(w.root, func(path string, d fs.DirEntry) error {
		if d.IsDir() {
			return nil
		}
		// Stat, not the entry's Lstat: Load reads through a symlink, and so must a poll.
		if info, err := os.Stat(path); err == nil {
			snap[path] = stamp{size: info.Size(), mtime: info.ModTime()}
		}
		return nil
	})
	return snap
}

// firstDifference is the first path, in lexical order, that one scan has and the other has
// not or has stamped otherwise; "" when they agree.
func firstDifference(a, b map[string]stamp) string {
	var diff []string
	for p, s := range a {
		if t, ok := b[p]; !ok || t != s {
			diff = append(diff, p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			diff = append(diff, p)
		}
	}
	if len(diff) == 0 {
		return ""
	}
	return slices.Min(diff)
}

// walkTree visits what model.Load reads under dir: the directories, except hidden ones
// (dir itself whatever its name), and the description files in them. fn's error stops it.
func walkTree(dir string, fn func(path string, d fs.DirEntry) error) error {
	// A root that is a symlink to a directory (a release switched with `ln -sfn`) is walked
	// as the directory it names: WalkDir does not descend into a symlinked root.
	if info, err := os.Stat(dir); err == nil && info.IsDir() {
		dir = filepath.Clean(dir) + string(filepath.Separator)
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return fn(path, d)
		}
		if !model.IsDescriptionFile(d.Name()) {
			return nil
		}
		return fn(path, d)
	})
}
