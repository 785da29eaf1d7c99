package state

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// newStore opens a store in a fresh directory and closes it when the test ends.
func newStore(t testing.TB) *Store {
	t.Helper()
	return openStore(t, filepath.Join(t.TempDir(), "state"))
}

// openStore opens the store in dir and closes it when the test ends.
func openStore(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// fileModes returns the permission bits of dir (as ".") and of every entry in it.
func fileModes(dir string) (map[string]fs.FileMode, error) {
	modes := make(map[string]fs.FileMode)
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	modes["."] = fi.Mode().Perm()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		modes[e.Name()] = info.Mode().Perm()
	}
	return modes, nil
}

// checkPrivateModes fails the test unless dir is 0700 and every file in it 0600, and unless the
// files that must be there are.
func checkPrivateModes(t *testing.T, modes map[string]fs.FileMode) {
	t.Helper()
	for _, name := range []string{".", dbFileName, dbFileName + "-wal", dbFileName + "-shm", controllerPasswordFileName, lockFileName} {
		if _, ok := modes[name]; !ok {
			t.Errorf("%s is missing from the state directory (have %v)", name, modes)
		}
	}
	for name, mode := range modes {
		want := fileMode
		if name == "." {
			want = dirMode
		}
		if mode != want {
			t.Errorf("mode of %s = %v, want %v", name, mode, want)
		}
	}
}

// Environment of the helper process: what it does and in which state directory.
const (
	helperModeEnv = "MESHCTL_STATE_TEST_HELPER"
	helperDirEnv  = "MESHCTL_STATE_TEST_DIR"
	helperGateEnv = "MESHCTL_STATE_TEST_GATE"
)

// helperCommand returns a command that runs this test binary as a helper process in mode.
func helperCommand(t *testing.T, mode, dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperModeEnv+"="+mode, helperDirEnv+"="+dir)
	return cmd
}

// TestHelperProcess is not a test: it is the child process of the tests that need one (a
// process to kill, a process with its own umask). It does nothing unless helperModeEnv is set.
func TestHelperProcess(t *testing.T) {
	t.Parallel()
	mode := os.Getenv(helperModeEnv)
	if mode == "" {
		return
	}
	if err := runHelper(mode, os.Getenv(helperDirEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

func runHelper(mode, dir string) error {
	ctx := context.Background()
	switch mode {
	case "crash":
		// Hold the lock and an open write transaction, with committed data behind it, until
		// the parent kills this process.
		if _, err := AcquireLock(ctx, dir, false, nil); err != nil {
			return err
		}
		s, err := Open(dir)
		if err != nil {
			return err
		}
		if _, err := s.Mint(ctx, []string{"node.crash"}, bcrypt.MinCost, "issue"); err != nil {
			return err
		}
		if _, err := s.RecordApply(ctx, ApplyRecord{Summary: "committed", Outcome: "applied"}); err != nil {
			return err
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO applies (started, finished, user, host, git_commit, summary, outcome)
			VALUES ('', '', '', '', '', 'uncommitted', '')`); err != nil {
			return err
		}
		fmt.Println("ready")
		// Block until killed; should the parent die first, its end of stdin closes.
		io.Copy(io.Discard, os.Stdin)
		return fmt.Errorf("stdin closed before the parent killed this process")

	case "open":
		// For each state directory the parent names on stdin: open the store and take the
		// apply lock at the instant the parent releases the gate (its flock on the file named
		// in helperGateEnv), where the other helpers wait too; say how it went, in one line,
		// and hold what it got until the parent says "release".
		gate, err := os.Open(os.Getenv(helperGateEnv))
		if err != nil {
			return err
		}
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			fmt.Println("waiting")
			if err := syscall.Flock(int(gate.Fd()), syscall.LOCK_SH); err != nil {
				return err
			}
			s, err := Open(in.Text())
			var l *Lock
			if err == nil {
				l, err = AcquireLock(ctx, in.Text(), false, nil)
			}
			if err := syscall.Flock(int(gate.Fd()), syscall.LOCK_UN); err != nil {
				return err
			}
			if err != nil {
				fmt.Println(err)
			} else {
				fmt.Println("locked")
			}
			in.Scan()
			if l != nil {
				l.Unlock()
			}
			if s != nil {
				s.Close()
			}
			fmt.Println("released")
		}
		return nil

	case "umask":
		// Everything the store creates, under a umask that would leave new files world-readable.
		syscall.Umask(0)
		s, err := Open(dir)
		if err != nil {
			return err
		}
		defer s.Close()
		if _, err := s.ControllerPassword(ctx, bcrypt.MinCost); err != nil {
			return err
		}
		l, err := AcquireLock(ctx, dir, false, nil)
		if err != nil {
			return err
		}
		defer l.Unlock()
		modes, err := fileModes(dir)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(modes)
	}
	return fmt.Errorf("unknown helper mode %q", mode)
}

// startPiped starts cmd with its standard input and output piped to the test, and its standard
// error kept for a failure's message.
func startPiped(t *testing.T, cmd *exec.Cmd) (stdin io.WriteCloser, stdout *bufio.Scanner, stderr *bytes.Buffer) {
	t.Helper()
	stderr = &bytes.Buffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return stdin, bufio.NewScanner(out), stderr
}

// startCrashHelper starts a helper process that holds the apply lock and an open transaction in
// dir, and returns once it says so. The process is killed when the test ends, if not before.
func startCrashHelper(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := helperCommand(t, "crash", dir)
	stdin, lines, stderr := startPiped(t, cmd)
	t.Cleanup(func() {
		stdin.Close()
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	for lines.Scan() {
		if lines.Text() == "ready" {
			return cmd
		}
	}
	cmd.Wait()
	t.Fatalf("the helper process ended before it was ready: %v\n%s", cmd.ProcessState, stderr.Bytes())
	return nil
}
