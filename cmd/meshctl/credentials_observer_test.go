package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/testnats/opmode"
	"github.com/meshbus/meshctl/render"
)

// observerMesh is cliMesh with an observer, alice.
const observerMesh = cliMesh + "observers:\n  - name: alice\n"

// An observer is issued a credential like any principal, listed beside the others, and with it
// the nats CLI reads the mesh's streams: with a password, and with bus.auth: nkey a seed,
// handed to the CLI as docs/observers.md shows (--nkey with the seed in a file). A name the
// mesh does not derive is refused with the observer's name suggested.
func TestAnObserverIsIssuedACredentialTheNatsCLILogsInWith(t *testing.T) {
	t.Parallel()
	cli := opmode.NatsCLIBinary(t)
	for _, c := range []struct {
		name, yaml, secret string
	}{
		{"password", observerMesh, "password"},
		{"nkey", strings.Replace(observerMesh, "bus:\n", "bus:\n  auth: nkey\n", 1), "seed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := writeMesh(t, map[string]string{"mesh.yaml": c.yaml})
			st := filepath.Join(t.TempDir(), "state")
			common := []string{"-f", dir, "--state", st, "--bcrypt-cost", "4"}
			if code, _, errOut := meshctl(t, append([]string{"apply"}, common...)...); code != exitOK {
				t.Fatalf("apply: exit %d\n%s", code, errOut)
			}
			url := serveEmbedded(t, dir, st)

			code, out, errOut := meshctl(t, append([]string{"credentials", "issue", "observer.alice"}, common...)...)
			if code != exitOK || !strings.Contains(errOut, "the only copy of its "+c.secret) {
				t.Fatalf("issue observer.alice: exit %d\n%s", code, errOut)
			}
			mem, err := host.ReadMembership(strings.NewReader(out))
			if err != nil || mem.User != "observer.alice" {
				t.Fatalf("the membership printed is not observer.alice's: %v", err)
			}

			home := t.TempDir()
			args := []string{"--server", url, "--inbox-prefix", render.Inbox(mem.User), "stream", "report"}
			env := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + home}
			if c.secret == "seed" {
				seed := filepath.Join(home, "alice.nk")
				if err := os.WriteFile(seed, []byte(mem.Seed), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append([]string{"--nkey", seed}, args...)
			} else {
				env = append(env, "NATS_USER="+mem.User, "NATS_PASSWORD="+mem.Password)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, cli, args...)
			cmd.Env = env
			var report, cliErr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &report, &cliErr
			if err := cmd.Run(); err != nil || strings.Contains(cliErr.String(), "Violation") {
				t.Fatalf("nats stream report as observer.alice: %v\n%s%s", err, report.String(), cliErr.String())
			}
			for _, s := range []string{render.StreamControl, render.StreamEvents, render.StreamNodes, render.SeatStreamName("mailer")} {
				if !strings.Contains(report.String(), s) {
					t.Errorf("the stream report does not list %s:\n%s", s, report.String())
				}
			}

			if code, out, _ := meshctl(t, append([]string{"credentials", "list"}, common...)...); code != exitOK || !strings.Contains(out, "observer.alice") {
				t.Errorf("credentials list: exit %d, observer.alice not listed:\n%s", code, out)
			}
			code, out, errOut = meshctl(t, append([]string{"credentials", "issue", "observer.alcie"}, common...)...)
			if code != exitError || out != "" || !strings.Contains(errOut, `did you mean "observer.alice"?`) || !strings.Contains(errOut, "observer.<name>") {
				t.Errorf("issuing an observer the mesh does not declare: exit %d\n%s", code, errOut)
			}
		})
	}
}
