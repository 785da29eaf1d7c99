package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/bus/bustest"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// storedHash is the hash the state store in dir holds of principal.
func storedHash(t *testing.T, dir, principal string) string {
	t.Helper()
	st, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hashes, err := st.Hashes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return hashes[principal]
}

// A controller password file that is not the controller's — replaced by another, edited, or
// gone while the store holds the controller's hash — is never minted anew: every copy of the
// password (a standby's, a CI secret, the backup a restore needs) would go stale with nothing
// said. apply, diff, credentials and watch each refuse with exit 2 (watch keeps retrying),
// saying what is wrong and the two ways out; the file, the stored hash and the accounts config
// the server serves stay as they were. With the right file back, the bus is in sync.
func TestAWrongControllerPasswordFileIsRefusedNeverMintedAnew(t *testing.T) {
	t.Parallel()
	srv := bustest.StartTestServer(t, t.TempDir())
	dir := writeMesh(t, map[string]string{"mesh.yaml": srv.Mesh()})
	st := t.TempDir()
	if code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", st, "--bcrypt-cost", "4"); code != exitOK {
		t.Fatalf("the first apply: exit %d\n%s%s", code, out, errOut)
	}
	path := filepath.Join(st, "controller.password")
	right, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hash := storedHash(t, st, render.ControllerUser)
	served, err := os.ReadFile(srv.AccountsFile)
	if err != nil {
		t.Fatal(err)
	}
	servedAt := modTime(t, srv.AccountsFile)

	for _, tc := range []struct {
		name string
		file []byte // nil: no file
	}{
		{"replaced", []byte("NOTTHECONTROLLERSPASSWORD2\n")},
		{"edited", []byte(strings.TrimSpace(string(right)) + "X\n")},
		{"missing", nil},
	} {
		if tc.file == nil {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(path, tc.file, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"apply", "-f", dir, "--state", st, "--bcrypt-cost", "4"},
			{"diff", "-f", dir, "--state", st},
			{"credentials", "issue", "alpha.shop", "-f", dir, "--state", st, "-o", filepath.Join(t.TempDir(), "shop.json")},
		} {
			code, out, errOut := meshctl(t, args...)
			if code != exitError {
				t.Errorf("%s: meshctl %s: exit %d, want %d\n%s%s", tc.name, args[0], code, exitError, out, errOut)
			}
			for _, want := range []string{"controller.password", "meshctl credentials rotate controller"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("%s: meshctl %s does not say %q:\n%s", tc.name, args[0], want, errOut)
				}
			}
			if strings.Contains(errOut, "mints a new one") {
				t.Errorf("%s: meshctl %s still advises minting a new controller password:\n%s", tc.name, args[0], errOut)
			}
		}
		w := watchProcess(t, dir, st)
		w.logged(t, 0, "the watch refusing the controller's password file", "controller.password", "credentials rotate controller")
		if code, _ := w.signal(t, os.Interrupt); code != exitOK {
			t.Errorf("%s: the watch exited %d on SIGINT:\n%s", tc.name, code, w.stderr)
		}

		now, err := os.ReadFile(path)
		switch {
		case tc.file == nil && err == nil:
			t.Errorf("%s: a controller password file was written where there was none", tc.name)
		case tc.file != nil && !bytes.Equal(now, tc.file):
			t.Errorf("%s: the controller password file was rewritten", tc.name)
		}
		if got := storedHash(t, st, render.ControllerUser); got != hash {
			t.Errorf("%s: the controller's stored hash was replaced", tc.name)
		}
		if got, _ := os.ReadFile(srv.AccountsFile); !bytes.Equal(got, served) || !modTime(t, srv.AccountsFile).Equal(servedAt) {
			t.Errorf("%s: the accounts config was rewritten", tc.name)
		}
	}

	if err := os.WriteFile(path, right, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", st)
	if code != exitOK || !strings.Contains(errOut, "already in sync") {
		t.Fatalf("with the right file back: exit %d, want 0 and in sync\n%s%s", code, out, errOut)
	}

	// The served config changed by hand to refuse the controller: apply installs its own
	// again, and says so, rather than that nothing was changed.
	served, err = os.ReadFile(srv.AccountsFile)
	if err != nil {
		t.Fatal(err)
	}
	locked := regexp.MustCompile(`(\{ user: "controller", password: ")[^"]*`).ReplaceAll(served, []byte("${1}$2a$04$abcdefghijklmnopqrstuu5Ltm8kM2bVNRl9hH8v3Yw1RsF7QWzQy"))
	if bytes.Equal(locked, served) {
		t.Fatal("the test found no controller entry to change")
	}
	if err := os.WriteFile(srv.AccountsFile, locked, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := bus.PIDFileReloader(srv.PIDFile).Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = meshctl(t, "apply", "-f", dir, "--state", st)
	if code != exitOK || strings.Contains(errOut, "nothing was changed") || !strings.Contains(errOut, "was installed") {
		t.Fatalf("apply installing the config that lets the controller in: exit %d, want 0 saying it installed it\n%s%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", dir, "--state", st); code != exitOK {
		t.Fatalf("diff after: exit %d\n%s%s", code, out, errOut)
	}

	// The other way out of a file the store refuses: rotating the controller, which needs no
	// working password to join the bus with. Another copy of the store wrote the bus meanwhile
	// (a CI apply, restored from it): the rotation reaches the copy on the bus all the same.
	if code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", filepath.Join(t.TempDir(), "ci"), "--controller-password-file", path, "--wait"); code != exitOK {
		t.Fatalf("a CI apply: exit %d\n%s%s", code, out, errOut)
	}
	if err := os.WriteFile(path, []byte("NOTTHECONTROLLERSPASSWORD2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = meshctl(t, "credentials", "rotate", "controller", "-f", dir, "--state", st)
	if code != exitOK {
		t.Fatalf("rotating the controller over a file the store refuses: exit %d\n%s%s", code, out, errOut)
	}
	rotated, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := controllerLogin(srv, strings.TrimSpace(string(rotated))); err != nil {
		t.Errorf("the rotated controller password does not log in: %v", err)
	}
	if err := controllerLogin(srv, strings.TrimSpace(string(right))); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("the controller password before the rotation: %v, want refused", err)
	}
	if code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", st, "--wait"); code != exitOK || !strings.Contains(errOut, "already in sync") {
		t.Fatalf("apply after the rotation: exit %d, want in sync\n%s%s", code, out, errOut)
	}
	again := filepath.Join(t.TempDir(), "restored")
	if code, out, errOut := meshctl(t, "state", "restore", "-f", dir, "--state", again, "--controller-password-file", path); code != exitOK {
		t.Fatalf("restoring with the rotated password: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", dir, "--state", again); code != exitOK {
		t.Fatalf("diff of the store restored with the rotated password: exit %d\n%s%s", code, out, errOut)
	}
}

func modTime(t *testing.T, path string) time.Time {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}

// systemReloaded is srv's description with its reload by a request as meshctl's system user.
func systemReloaded(srv *bustest.TestServer) string {
	return regexp.MustCompile(`reload: \{ pid_file: [^}]*\}`).ReplaceAllString(srv.Mesh(), "reload: system")
}

// controllerLogin logs in to srv once as the controller with password, with JetStream answering.
func controllerLogin(srv *bustest.TestServer, password string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := busclient.DialAlone(ctx, busclient.Target{URL: srv.URL, Fingerprint: srv.Fingerprint},
		busclient.Credential{User: render.ControllerUser, Password: password})
	if err != nil {
		return err
	}
	defer c.Close()
	js, err := jetstream.New(c.Conn)
	if err != nil {
		return err
	}
	_, err = js.AccountInfo(ctx)
	return err
}

// firstSystemApply applies dir, reloaded by request, for the first time: the server learns
// meshctl's system user from a file it must be reloaded once by hand to read.
func firstSystemApply(t *testing.T, srv *bustest.TestServer, dir, st string) {
	t.Helper()
	code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", st, "--bcrypt-cost", "4")
	if code != exitError || !strings.Contains(errOut, "reload that server once by hand") {
		t.Fatalf("the first apply reloaded by request: exit %d, want %d asking for one reload by hand\n%s%s", code, exitError, out, errOut)
	}
	if err := bus.PIDFileReloader(srv.PIDFile).Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A reload by signal is done a moment after the signal: once the controller logs in.
	pw, err := os.ReadFile(filepath.Join(st, "controller.password"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !backoff.Retry(ctx, backoff.Backoff{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond}, func() bool {
		return controllerLogin(srv, strings.TrimSpace(string(pw))) == nil
	}) {
		t.Fatal("the controller cannot log in after the reload by hand")
	}
	if code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", st); code != exitOK {
		t.Fatalf("the apply after the reload by hand: exit %d\n%s%s", code, out, errOut)
	}
}

// `credentials rotate controller` is the one way the controller's password changes: the new one
// in STATE/controller.password, never printed; the server, reloaded by request as the system
// user it still knows (the previous password's), is seen serving it; the previous password no
// longer logs in, the new one does, a host's credential is untouched, the bus is in sync, and
// the next change reloads the server by request as the system user of the new password.
// Neither the controller nor meshctl's system user is issued or revoked.
func TestRotatingTheControllerIsProvenOnTheServer(t *testing.T) {
	t.Parallel()
	srv := bustest.StartTestServer(t, t.TempDir())
	dir := writeMesh(t, map[string]string{"mesh.yaml": systemReloaded(srv)})
	st := t.TempDir()
	firstSystemApply(t, srv, dir, st)
	shop := filepath.Join(t.TempDir(), "shop.json")
	if code, out, errOut := meshctl(t, "credentials", "issue", "alpha.shop", "-f", dir, "--state", st, "-o", shop); code != exitOK {
		t.Fatalf("issuing alpha.shop: exit %d\n%s%s", code, out, errOut)
	}
	path := filepath.Join(st, "controller.password")
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	for _, args := range [][]string{
		{"credentials", "revoke", "controller"},
		{"credentials", "issue", "controller"},
		{"credentials", "revoke", render.SystemUser},
		{"credentials", "rotate", render.SystemUser},
	} {
		code, _, errOut := meshctl(t, append(args, "-f", dir, "--state", st)...)
		if code != exitError || !strings.Contains(errOut, "meshctl credentials rotate controller") {
			t.Errorf("meshctl %s: exit %d, want %d pointing to the rotation:\n%s", strings.Join(args, " "), code, exitError, errOut)
		}
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, old) {
		t.Fatal("a refused command changed the controller's password")
	}

	code, out, errOut := meshctl(t, "credentials", "rotate", "controller", "-f", dir, "--state", st)
	if code != exitOK || !strings.Contains(errOut, "seen serving") {
		t.Fatalf("rotating the controller: exit %d, want 0, the server seen serving it\n%s%s", code, out, errOut)
	}
	rotated, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	newPW, oldPW := strings.TrimSpace(string(rotated)), strings.TrimSpace(string(old))
	if newPW == oldPW || out != "" || strings.Contains(errOut, newPW) || strings.Contains(errOut, oldPW) {
		t.Fatalf("the rotation kept the password, or printed one:\n%s%s", out, errOut)
	}
	if err := controllerLogin(srv, oldPW); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("the previous controller password after the rotation: %v, want refused", err)
	}
	if err := controllerLogin(srv, newPW); err != nil {
		t.Errorf("the new controller password does not log in: %v", err)
	}
	if err := joins(readMembershipFile(t, shop)); err != nil {
		t.Errorf("a host's credential stopped working with the controller's rotation: %v", err)
	}
	if code, out, errOut := meshctl(t, "diff", "-f", dir, "--state", st); code != exitOK {
		t.Errorf("diff after the rotation: exit %d, want in sync\n%s%s", code, out, errOut)
	}
	// The next change is reloaded by request, as the system user of the new password.
	if code, out, errOut := meshctl(t, "credentials", "issue", "alpha.shop", "-f", dir, "--state", st, "-o", shop, "--force"); code != exitOK {
		t.Fatalf("issuing after the rotation: exit %d\n%s%s", code, out, errOut)
	}
	if err := joins(readMembershipFile(t, shop)); err != nil {
		t.Errorf("the credential issued after the rotation does not log in: %v", err)
	}
	if code, out, errOut := meshctl(t, "apply", "-f", dir, "--state", st, "--wait"); code != exitOK || !strings.Contains(errOut, "already in sync") {
		t.Errorf("apply after the rotation: exit %d, want in sync\n%s%s", code, out, errOut)
	}
}
