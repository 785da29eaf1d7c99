package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/redact"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

func init() {
	register("credentials", command{summary: "issue, list and revoke the principals' passwords", run: runCredentials})
}

const credentialsHelp = `
Usage:
  meshctl credentials issue  PRINCIPAL [-f DIR] [--state DIR] [-o FILE [--force]]
  meshctl credentials rotate PRINCIPAL [-f DIR] [--state DIR] [-o FILE [--force]]
  meshctl credentials list   [-f DIR] [--state DIR] [-o text|json]
  meshctl credentials revoke PRINCIPAL [-f DIR] [--state DIR]

Every principal the mesh derives (node.<n>, enrol.<n>, <node>.<module>) has its own
password. The store keeps only its bcrypt hash; a principal never issued one has a
locked entry that no password opens. With bus.auth: nkey each has an nkey instead: the
store keeps its public key, and the membership carries its seed ("seed": "SU…") where
it would carry a password; what follows says password for either.

issue   mints a new password (replacing any previous one) and prints the membership
        once, on stdout, as one JSON line — address (never with credentials in it),
        certificate fingerprint, user, password — so it can be piped to the machine
        unread. Every other message goes to stderr. With -o FILE it writes the line to
        FILE instead, readable by its owner only (0600): a shell's '> FILE' would leave
        the password readable by every user. An existing FILE is refused before anything
        is minted, unless --force replaces it. An enrolled node's own credential
        (node.<n>) is refused: the controller sealed it to the node's agent, and a new
        password would lock the agent out. Enrol the node again instead: issue
        enrol.<n>, and the agent enrols again with it.
rotate  replaces a principal's password. For a module instance on a node that enrolled,
        the controller hands the credential out: rotate revokes the old one (it stops
        working at once), and waits up to 30s for the controller inside 'meshctl watch'
        to mint the new one, seal it to the node's key and declare it in a new
        generation, which the node's agent writes; no password is printed. issue
        refuses such an instance, since the controller would replace what it printed.
        For every other principal rotate is issue: the new membership, printed once.
list    shows each principal the mesh derives, when its credential was minted, and
        which have none. Never a hash or a password.
revoke  deletes the hash: the principal is locked out at the next reload. A module
        instance on an enrolled node is then declared a new credential by the
        controller; to lock it out, take it off the node in the description.

Issuing or revoking re-renders the accounts config and makes it live: on an external
bus by its reload method, on the embedded bus through the meshctl process serving it,
or at the embedded bus's next start. It exits 0 only once the server is seen serving
the new config (or no bus runs yet); otherwise it exits 2, the membership of an issued
credential printed all the same.

The controller's own credential is meshctl's, kept in STATE/controller.password and
minted on first use; revoking "controller" makes meshctl mint a new one next time. So is
that of _meshctl.system, the system user meshctl reloads servers as (reload: system), in
STATE/system.password.

Example:
  meshctl credentials issue node.one -f mesh/ | ssh one 'umask 077; cat > /etc/mesh/membership.json'
  meshctl credentials issue alpha.audit -f mesh/ -o /tmp/audit.json
`

func runCredentials(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "credentials", credentialsHelp)
	dir := f.dirFlag()
	sf := f.restorableStateFlag()
	cost := f.costFlag()
	out := f.String("o", "", "list: output format, text (the default) or json; issue: write the membership to this file (0600) instead of stdout")
	force := f.Bool("force", false, "issue -o: replace FILE if it exists")
	pos, done, code := f.parse(args)
	if done {
		return code
	}
	if len(pos) == 0 {
		f.printHelp(e.stderr)
		return exitError
	}
	verb, rest := pos[0], pos[1:]
	want := map[string]int{"issue": 1, "rotate": 1, "revoke": 1, "list": 0}
	n, known := want[verb]
	if !known || len(rest) != n {
		e.errorf("usage: meshctl credentials issue|rotate|revoke PRINCIPAL, or meshctl credentials list")
		return exitError
	}
	// Rotating is issuing, but for a credential the controller hands out (below).
	operation := "credentials " + verb
	rotate := verb == "rotate"
	if rotate {
		verb = "issue"
	}
	format := "text"
	if verb == "list" && *out != "" {
		format = *out
	}
	if !checkFormat(e, format, "text", "json") {
		return exitError
	}
	if verb == "issue" && (*out == "text" || *out == "json") {
		e.errorf("credentials issue prints its membership as JSON; -o names a file to write it to (./%s for a file of that name)", *out)
		return exitError
	}
	if verb == "revoke" && *out != "" {
		e.errorf("credentials revoke writes nothing; -o is for issue (a file) and list (a format)")
		return exitError
	}
	m, st, code := sf.loadAndOpen(ctx, e, *dir)
	if code != exitOK {
		return code
	}
	defer st.Close()
	desired := render.Derive(m)
	users := desired.Users()

	if verb == "list" {
		creds, err := st.Credentials(ctx)
		if err != nil {
			e.errorf("%v", err)
			return exitError
		}
		type row struct {
			Principal string `json:"principal"`
			MintedAt  string `json:"minted_at,omitempty"`
			Operation string `json:"operation,omitempty"`
			Derived   bool   `json:"derived"`
		}
		byName := map[string]row{}
		for _, u := range users {
			byName[u] = row{Principal: u, Derived: true}
		}
		for _, c := range creds {
			r := byName[c.Principal]
			r.Principal, r.MintedAt, r.Operation = c.Principal, c.MintedAt.Format("2006-01-02T15:04:05Z07:00"), c.Operation
			byName[c.Principal] = r
		}
		names := make([]string, 0, len(byName))
		for n := range byName {
			names = append(names, n)
		}
		slices.Sort(names)
		rows := make([]row, len(names))
		missing := 0
		for i, n := range names {
			rows[i] = byName[n]
			if rows[i].MintedAt == "" {
				missing++
			}
		}
		if format == "json" {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rows)
			return exitOK
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PRINCIPAL\tMINTED\tBY")
		for _, r := range rows {
			minted, by := r.MintedAt, r.Operation
			if minted == "" {
				minted, by = "none: locked", ""
			}
			if !r.Derived {
				by += " (no longer derived by the mesh)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Principal, minted, by)
		}
		_ = tw.Flush()
		fmt.Fprintf(e.stderr, "%d principal(s), %d without a credential\n", len(rows), missing)
		return exitOK
	}

	principal := rest[0]
	if principal == render.ControllerUser && verb == "issue" {
		e.errorf("the controller's credential is meshctl's own, in %s/controller.password; revoke it to have a new one minted", st.Dir())
		return exitError
	}
	if principal == render.SystemUser && verb == "issue" {
		e.errorf("%s's credential is meshctl's own, in %s/system.password; revoke it to have a new one minted", render.SystemUser, st.Dir())
		return exitError
	}
	if !slices.Contains(users, principal) && verb == "issue" {
		hint := ""
		if s := model.Suggest(principal, users); s != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", s)
		}
		e.errorf("the mesh in %s derives no principal %q%s; principals are node.<node>, enrol.<node> and <node>.<module>", *dir, principal, hint)
		return exitError
	}
	// Before anything is minted or revoked: a store that does not manage the bus must change
	// nothing, neither the bus nor itself.
	if err := reconcile.CheckManager(ctx, m, st); err != nil {
		e.errorf("%v", err)
		return exitError
	}
	// Nor may a credential issued or revoked here carry a change of bus.auth onto the bus:
	// that is an apply's, with --allow-reissue.
	if err := reconcile.CheckAuth(ctx, m, st); err != nil {
		e.errorf("%v", err)
		return exitError
	}
	// Every change is kept on the bus too, before the command returns (restore.go). A store
	// that never applied has no controller to join as, and no copy on any bus yet.
	stop, err := reconcile.KeepOnBus(ctx, m, st)
	if err != nil && !errors.Is(err, state.ErrNoController) {
		e.errorf("%v", err)
		return exitError
	}
	if stop != nil {
		defer stop()
	}
	// password is the new credential's secret: a password, or with nkey an nkey seed.
	var password string
	var nkey bool
	var file *membershipFile
	// behind is a change the store took and its copy on the bus did not: the credential is
	// what it says, and the command exits 2 all the same, since the bus could not rebuild it.
	var behind error
	switch verb {
	case "issue":
		if node, enrolled, code := enrolledNode(ctx, e, st, desired, principal); code != exitOK {
			return code
		} else if enrolled {
			// A password minted here would replace the one the controller sealed to the node's
			// agent, which would be locked out at the reload with nothing said. The enrolled
			// node's credential is replaced only by enrolling it again, which the agent does
			// with its own key and hears the answer to.
			e.errorf("node %s enrolled: its agent holds the credential the controller sealed to it, and a password %s here would lock the agent out; to replace it, enrol the node again: 'meshctl credentials issue %s', then the agent enrols again with that credential",
				node, mintedHow(rotate), render.EnrolUser(node))
			return exitError
		}
		node, declared, code := declaredNode(ctx, e, st, m, principal)
		switch {
		case code != exitOK:
			return code
		case declared && !rotate:
			e.errorf("%s runs on node %s, which enrolled: the controller hands out its credential, sealed to the node, and would replace a password issued here at once; use 'meshctl credentials rotate %s'",
				principal, node, principal)
			return exitError
		case declared && *out != "":
			e.errorf("%s's new credential goes to node %s sealed, never printed; -o writes nothing for it", principal, node)
			return exitError
		case declared:
			return rotateDeclared(ctx, e, st, m, principal, node)
		}
		if *out != "" {
			var err error
			if file, err = claimMembershipFile(*out, *force); err != nil {
				e.errorf("%v", err)
				return exitError
			}
		}
		p, _ := desired.Principal(principal)
		nkey = p.Nkey
		var minted map[string]string
		var err error
		if nkey {
			minted, err = st.MintNkeys(ctx, []string{principal}, operation)
		} else {
			minted, err = st.Mint(ctx, []string{principal}, *cost, operation)
		}
		if errors.Is(err, state.ErrReplicaBehind) {
			behind, err = err, nil
		}
		if err != nil {
			if file != nil {
				file.abandon()
			}
			e.errorf("%v", err)
			return exitError
		}
		password = minted[principal]
	case "revoke":
		had, err := st.Revoke(ctx, principal)
		if errors.Is(err, state.ErrReplicaBehind) {
			behind, err = err, nil
		}
		if err != nil {
			e.errorf("%v", err)
			return exitError
		}
		if !had {
			e.errorf("%s has no credential to revoke", principal)
			return exitError
		}
	}
	what, err := reconcile.SyncAccounts(ctx, m, st)
	if err != nil {
		// The store already holds the new state; the next apply or watch cycle installs it.
		e.errorf("the credential is %sd, but the accounts config could not be made live: %v", verb, err)
		if password == "" {
			return exitError
		}
	} else {
		fmt.Fprintln(e.stderr, what)
	}
	if verb == "revoke" {
		if node, declared, _ := declaredNode(ctx, e, st, m, principal); declared {
			fmt.Fprintf(e.stderr, "%s's credential is revoked: it can no longer log in; the controller declares the instance a new one, since the description puts it on node %s (remove it from the node there to lock it out)\n", principal, node)
			return replicaBehind(e, behind)
		}
		fmt.Fprintf(e.stderr, "%s is revoked: it can no longer log in\n", principal)
		return replicaBehind(e, behind)
	}
	secret := "password"
	if nkey {
		secret = "seed"
	}
	fields := map[string]any{
		"address": busAddress(m, st.Dir()), "fingerprint": m.Bus.Fingerprint, "user": principal, secret: password,
	}
	if len(m.Bus.Servers) > 1 {
		// Every server, so a host reaches the bus through any of them; address stays the
		// first, for a reader that knows only it.
		var servers []busclient.Target
		for _, s := range m.Bus.Servers {
			servers = append(servers, busclient.Target{URL: s.URL, Fingerprint: s.Fingerprint})
		}
		t := host.NewMembership(busclient.Cluster(servers), principal, "")
		fields["servers"], fields["fingerprint"] = t.Servers, t.Fingerprint
	}
	membership, _ := json.Marshal(fields)
	membership = append(membership, '\n')
	if file != nil {
		if werr := file.write(membership); werr != nil {
			e.errorf("%s's credential is minted, but its membership could not be written to %s: %v; issue it again", principal, *out, werr)
			return exitError
		}
		fmt.Fprintf(e.stderr, "%s's credential is minted; its membership, the only copy of its %s, is in %s (0600)\n", principal, secret, *out)
	} else {
		fmt.Fprintf(e.stderr, "%s's credential is minted; the membership below is the only copy of its %s\n", principal, secret)
		_, _ = e.stdout.Write(membership)
	}
	if err != nil {
		// Written all the same, since the store keeps only the hash; but it is no working
		// credential until the server serves a config that carries it.
		fmt.Fprintf(e.stderr, "%s cannot log in yet: the server does not serve the config holding it; fix the server, then run apply\n", principal)
		return exitError
	}
	return replicaBehind(e, behind)
}

// replicaBehind reports a change the store took and its copy on the bus did not, exit 2: the
// store sends the copy the whole store at its next change, but until then a restore from the
// bus would miss it.
func replicaBehind(e *env, behind error) int {
	if behind == nil {
		return exitOK
	}
	e.errorf("%v", behind)
	return exitError
}

// mintedHow names what credentials does to a password: rotates it or issues it.
func mintedHow(rotate bool) string {
	if rotate {
		return "rotated"
	}
	return "issued"
}

// enrolledNode reports, for a node's own principal, its node and whether the store holds its
// enrolment; any other principal is no enrolled node's.
func enrolledNode(ctx context.Context, e *env, st *state.Store, d *render.Desired, principal string) (node string, enrolled bool, code int) {
	p, ok := d.Principal(principal)
	if !ok || p.Kind != render.KindNode {
		return "", false, exitOK
	}
	all, err := st.Enrolments(ctx)
	if err != nil {
		e.errorf("%v", err)
		return "", false, exitError
	}
	return p.Node, slices.ContainsFunc(all, func(en state.Enrolment) bool { return en.Node == p.Node }), exitOK
}

// busAddress is the address a host dials: the external URL, or the embedded bus's — where
// a running `meshctl watch` serves it, exactly that bus's URL (its port may have been
// chosen at start), else the address it listens on when it starts.
func busAddress(m *model.Mesh, stateDir string) string {
	if !m.Bus.Embedded() {
		return m.Bus.URL
	}
	if url, _, ok := bus.RunningEmbeddedProcess(stateDir); ok {
		return url
	}
	return redact.URL("nats://" + strings.TrimPrefix(m.Bus.Listen, "nats://"))
}
