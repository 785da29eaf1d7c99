package accounts

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/model"
)

// servers is a and its Others, each one server of the bus, in the order the description
// lists them. Verify, given once for the bus, applies to each.
func (a File) Servers() []File {
	first := a
	first.Others = nil
	out := []File{first}
	for _, o := range a.Others {
		o.Others = nil
		if o.StateDir == "" {
			o.StateDir = a.StateDir
		}
		if o.Verify == nil {
			o.Verify = a.Verify
		}
		out = append(out, o)
	}
	return out
}

// name is how messages name the server: its name in a cluster, or the accounts file of a
// single server.
func (a File) name() string {
	if a.Server != "" {
		return "server " + a.Server
	}
	return "the server"
}

// External is the external bus's accounts, one per server of the description, and the
// Target that reaches any of them. The error is a CA file (ca_file) that cannot be read.
func External(m *model.Mesh, stateDir string) (File, busclient.Target, error) {
	var all []File
	var targets []busclient.Target
	for _, srv := range m.Bus.Servers {
		t, err := serverTarget(m.Bus, srv)
		if err != nil {
			return File{StateDir: stateDir}, busclient.Target{}, err
		}
		a := File{Path: srv.AccountsFile, Reloader: reloaderFor(srv.Reload, t, stateDir, m.Bus.SystemUser), Target: t, StateDir: stateDir,
			Server: srv.Name, AccountOnly: m.Bus.AccountOnly()}
		if len(srv.Copy) > 0 {
			a.Copy = bus.CopyCommand(srv.Copy, model.CopyFileArg)
		}
		all = append(all, a)
		targets = append(targets, t)
	}
	if len(all) == 0 {
		return File{StateDir: stateDir}, busclient.Target{}, nil
	}
	first := all[0]
	first.Others = all[1:]
	return first, busclient.Cluster(targets), nil
}

// BusTarget is the Target that reaches the external bus m describes through any of its
// servers, recognised as the description says (pins, the CAs' text) and presenting its client
// certificate: what a membership of it names. The error is a CA file that cannot be read.
func BusTarget(m *model.Mesh) (busclient.Target, error) {
	_, t, err := External(m, "")
	return t, err
}

// serverTarget is how meshctl reaches srv, a server of the external bus b: its URL, its pins,
// the text of its CA file, and meshctl's own client certificate. The CA's text is what every
// membership carries, so one that holds no certificate is refused here, before anything is
// dialled or issued, rather than on each host that reads it.
func serverTarget(b model.Bus, srv model.Server) (busclient.Target, error) {
	t := busclient.Target{URL: srv.URL, Fingerprint: srv.Fingerprint, CertFile: b.CertFile, KeyFile: b.KeyFile}
	if srv.CAFile == "" {
		return t, nil
	}
	data, err := os.ReadFile(srv.CAFile)
	if err != nil {
		return t, fmt.Errorf("reading the CA of the bus at %s (ca_file): %w", t.Address(), err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		return t, fmt.Errorf("the CA of the bus at %s, %s (ca_file): %w", t.Address(), srv.CAFile, busclient.ErrNoCACertificate)
	}
	t.CA = string(data)
	return t, nil
}

// beforeFirstStart reports whether the server has no accounts config on the control host and
// nothing accepts a connection at its address: a server that cannot start before meshctl
// writes the file its config includes. Its file is written (and copied) like any other, not
// left alone as a server that is down, or a new cluster would never start.
func (a File) beforeFirstStart() bool {
	_, err := os.Stat(a.Path)
	return errors.Is(err, fs.ErrNotExist) && !listening(a.Target)
}

// AwaitingFirstStart reports whether some server of a is before its first start and none
// runs: a connection to the bus can only fail, and the servers without a file could never
// start. While any server runs, the plan finds the missing file and writes it.
func (a File) AwaitingFirstStart() bool {
	servers := a.Servers()
	return slices.ContainsFunc(servers, File.beforeFirstStart) &&
		!slices.ContainsFunc(servers, func(s File) bool { return listening(s.Target) })
}

// alreadyServes reports whether the server is seen serving exactly the rendering data, as
// meshctl last wrote it there; an error means the server did not answer at all.
func (a File) alreadyServes(ctx context.Context, data []byte) (bool, error) {
	g, known := loadGeneration(a.StateDir, a.Server)
	conf, err := os.ReadFile(a.Path)
	if err != nil || !known || !g.describes(a.Path, conf) {
		// Not what meshctl wrote: probe the server with a password no file holds, so a
		// server that is down still reads as down rather than as "to be written".
		g = generation{Password: "-"}
	}
	err = proveOnce(ctx, a.Target, g)
	switch {
	case errors.Is(err, errNotServed):
		return false, nil
	case err != nil:
		return false, err
	}
	rendered, _ := Unstamp(conf)
	return a.inShape(conf) && bytes.Equal(rendered, data), nil
}

// served reads the accounts config back as a plan compares it: the first server's file
// without its generation principal, and why the bus is not known to serve it ("" when every
// server is seen serving exactly the file meshctl wrote it, and all of them the same users).
// conf is the first server's file. For a cluster the reason ends with which generation each
// server serves, so a diff shows which server is behind.
func (a File) Served(ctx context.Context, conf []byte) ([]byte, string, error) {
	servers := a.Servers()
	rendered, why, err := servers[0].servedServer(ctx, conf)
	if len(servers) == 1 {
		return rendered, why, err
	}
	if err != nil {
		// The first server is down: its file is still what the plan compares, and the
		// reason says it is not seen serving it.
		rendered, _ = Unstamp(conf)
	}
	var reasons, generations []string
	for i, s := range servers {
		r := rendered
		if i > 0 {
			other, rerr := os.ReadFile(s.Path)
			if rerr != nil {
				reasons = append(reasons, fmt.Sprintf("%s has no accounts config meshctl can read at %s (%v)", s.name(), s.Path, rerr))
				generations = append(generations, s.name()+" none")
				continue
			}
			r, why, err = s.servedServer(ctx, other)
			if err != nil {
				r, _ = Unstamp(other)
			}
		}
		switch {
		case err != nil:
			reasons = append(reasons, fmt.Sprintf("%s is not seen serving anything (%v)", s.name(), err))
			generations = append(generations, s.name()+" not reachable")
		case why != "":
			reasons = append(reasons, s.name()+": "+why)
			generations = append(generations, s.name()+" not proven")
		default:
			g, _ := loadGeneration(s.StateDir, s.Server)
			generations = append(generations, fmt.Sprintf("%s serves %.12s", s.name(), g.SHA256))
		}
		if i > 0 && !bytes.Equal(r, rendered) {
			reasons = append(reasons, fmt.Sprintf("%s and %s have different users (one missed a change while down?)", servers[0].name(), s.name()))
		}
	}
	if len(reasons) == 0 {
		return rendered, "", nil
	}
	return rendered, strings.Join(reasons, "; ") + "; generations: " + strings.Join(generations, ", "), nil
}

// reloaderFor is how the server at t is reloaded; stateDir holds the password of meshctl's
// system user, for a reload by request, and su names the operator's where it asks as that one
// instead (bus.accounts: account).
func reloaderFor(r model.Reload, t busclient.Target, stateDir string, su *model.SystemUser) bus.Reloader {
	switch {
	case r.System && su != nil:
		return operatorSystemReloader(t, *su)
	case r.System:
		return systemReloader(t, stateDir)
	case r.PIDFile != "":
		return bus.PIDFileReloader(r.PIDFile)
	case len(r.Command) > 0:
		return bus.CommandReloader(r.Command)
	default:
		return bus.NoReloader()
	}
}
