package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/host"
	"github.com/meshbus/meshctl/internal/redact"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/reconcile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
	"github.com/meshbus/meshctl/wire"
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
  meshctl credentials issue  PRINCIPAL --creds FILE      (bus.auth: jwt)

Every principal the mesh derives (node.<n>, enrol.<n>, <node>.<module>, observer.<name>)
has its own password. The store keeps only its bcrypt hash; a principal never issued one has a
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
        An instance issued by hand before its node enrolled is not the controller's:
        enrolling keeps its credential, the agent leaves it alone ('meshctl status'
        says "by hand"), and issue and rotate mint it here.
        For every other principal rotate is issue: the new membership, printed once.
list    shows each principal the mesh derives, when its credential was minted, and
        which have none. Never a hash or a password.
revoke  deletes the hash: the principal is locked out at the next reload. A module
        instance on an enrolled node is then declared a new credential by the
        controller; to lock it out, take it off the node in the description. This is
        how an instance issued by hand is handed to the node's agent: its host is
        locked out, and the agent writes the credential the controller declares.

Issuing or revoking re-renders the accounts config and makes it live: on an external
bus by its reload method, on the embedded bus through the meshctl process serving it,
or at the embedded bus's next start. It exits 0 only once the server is seen serving
the new config (or no bus runs yet); otherwise it exits 2, the membership of an issued
credential printed all the same.

With bus.auth: jwt each principal is a user of the mesh's account: issue mints a fresh
key and a user JWT, and the membership carries both ("seed" and "jwt"); --creds FILE
writes them as a standard creds file (0600) instead, for a client that reads one.
The key it replaces is revoked in the account's JWT, which is pushed to every server;
revoke revokes the key the same way, and every server disconnects its holder at once.
No server file is written and no server reloads. Either succeeds only once every server
applies the account's JWT.

The controller's own credential is meshctl's, kept in STATE/controller.password:
minted on first use, never printed, and never minted anew behind your back — a file the
store's hash refuses (replaced, edited, missing) stops every command until the right
file is back. 'credentials rotate controller' replaces it: the new password goes into
STATE/controller.password, every server is seen serving a config that carries it, and
the old one no longer logs in; hand the new file to every holder (a standby watch, the
CI secret, a backup). The password of _meshctl.system, the system user meshctl reloads
servers as (reload: system), follows from the controller's and changes with it; neither
is issued or revoked. With bus.auth: jwt the controller is a user of the mesh's account
whose creds are STATE/controller.creds: 'credentials rotate controller' mints a new key
into that file and revokes the previous one on every server.

Example:
  meshctl credentials issue node.one -f mesh/ | ssh one 'umask 077; cat > /etc/mesh/membership.json'
  meshctl credentials issue alpha.audit -f mesh/ -o /tmp/audit.json
  meshctl credentials issue observer.alice -f mesh/ -o alice.json   # docs/observers.md
`

func runCredentials(ctx context.Context, e *env, args []string) int {
	f := newFlags(e, "credentials", credentialsHelp)
	dir := f.dirFlag()
	sf := f.restorableStateFlag()
	cost := f.costFlag()
	out := f.String("o", "", "list: output format, text (the default) or json; issue: write the membership to this file (0600) instead of stdout")
	force := f.Bool("force", false, "issue -o: replace FILE if it exists")
	credsOut := f.String("creds", "", "issue with bus.auth jwt: write a standard creds file (user JWT and seed, 0600) to this file instead of the membership")
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
	// Rotating is issuing, but for a credential the controller hands out (issue).
	req := issueRequest{operation: "credentials " + verb, rotate: verb == "rotate", cost: *cost, out: *out, force: *force}
	if req.rotate {
		verb = "issue"
	}
	format, ok := credentialsFormat(e, verb, *out)
	if !ok {
		return exitError
	}
	m, st, code := sf.loadAndOpen(ctx, e, *dir)
	if code != exitOK {
		return code
	}
	defer st.Close()
	desired := render.Derive(m)
	if verb == "list" {
		return listCredentials(ctx, e, st, m.Bus.JWT(), desired.Users(), format)
	}
	c := credentialChange{e: e, m: m, st: st, desired: desired, principal: rest[0]}
	if req.rotate && c.principal == render.ControllerUser {
		return c.rotateController(ctx, req)
	}
	if !c.checkIssuable(*dir, strings.TrimPrefix(req.operation, "credentials ")) {
		return exitError
	}
	if *credsOut != "" && (!m.Bus.JWT() || verb != "issue" || req.out != "") {
		e.errorf("--creds is for credentials issue with bus.auth: jwt, instead of -o: a creds file holds a user JWT")
		return exitError
	}
	if m.Bus.JWT() {
		return c.jwtChange(ctx, verb, req, *credsOut)
	}
	stop, code := startCredentialChange(ctx, e, m, st)
	if code != exitOK {
		return code
	}
	if stop != nil {
		defer stop()
	}
	if verb == "revoke" {
		return c.revoke(ctx)
	}
	return c.issue(ctx, req)
}

// credentialsFormat checks -o against the verb, "issue" for rotate too: list's output format,
// issue's file, nothing for revoke. It returns list's format, text unless -o says json.
func credentialsFormat(e *env, verb, out string) (format string, ok bool) {
	format = "text"
	if verb == "list" && out != "" {
		format = out
	}
	if !checkFormat(e, format, "text", "json") {
		return "", false
	}
	if verb == "issue" && (out == "text" || out == "json") {
		e.errorf("credentials issue prints its membership as JSON; -o names a file to write it to (./%s for a file of that name)", out)
		return "", false
	}
	if verb == "revoke" && out != "" {
		e.errorf("credentials revoke writes nothing; -o is for issue (a file) and list (a format)")
		return "", false
	}
	return format, true
}

// credentialRow is one principal in credentials list: when and by which operation its
// credential was minted (neither when it has none), and whether the mesh still derives it.
type credentialRow struct {
	Principal string `json:"principal"`
	MintedAt  string `json:"minted_at,omitempty"`
	Operation string `json:"operation,omitempty"`
	Derived   bool   `json:"derived"`
}

// listCredentials prints every principal the mesh derives or the store holds a credential of,
// as a table or as JSON; never a hash or a password.
func listCredentials(ctx context.Context, e *env, st *state.Store, jwtMode bool, users []string, format string) int {
	creds, err := st.Credentials(ctx)
	if jwtMode {
		creds, err = jwtCredentials(ctx, st)
	}
	if err != nil {
		e.errorf("%v", err)
		return exitError
	}
	rows := credentialRows(users, creds)
	if format == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rows)
		return exitOK
	}
	printCredentialTable(e, rows)
	return exitOK
}

// credentialRows is one row per principal, sorted by name: each the mesh derives, with the
// credential the store holds of it if any, and each the store holds a credential of that the
// mesh no longer derives.
func credentialRows(users []string, creds []state.Credential) []credentialRow {
	byName := map[string]credentialRow{}
	for _, u := range users {
		byName[u] = credentialRow{Principal: u, Derived: true}
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
	rows := make([]credentialRow, len(names))
	for i, n := range names {
		rows[i] = byName[n]
	}
	return rows
}

// printCredentialTable prints the rows as a table on stdout, and on stderr how many principals
// there are and how many of them have no credential.
func printCredentialTable(e *env, rows []credentialRow) {
	missing := 0
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PRINCIPAL\tMINTED\tBY")
	for _, r := range rows {
		minted, by := r.MintedAt, r.Operation
		if minted == "" {
			minted, by = "none: locked", ""
			missing++
		}
		if !r.Derived {
			by += " (no longer derived by the mesh)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Principal, minted, by)
	}
	_ = tw.Flush()
	fmt.Fprintf(e.stderr, "%d principal(s), %d without a credential\n", len(rows), missing)
}

// credentialChange is one principal's credential being issued, rotated or revoked, with the
// mesh and the store it is changed in.
type credentialChange struct {
	e         *env
	m         *model.Mesh
	st        *state.Store
	desired   *render.Desired
	principal string
}

// issueRequest is how credentials issue or rotate mints: the operation the store records,
// whether it rotates, the bcrypt cost, and the -o file (replaced only with force).
type issueRequest struct {
	operation string
	rotate    bool
	cost      int
	out       string
	force     bool
}

// checkIssuable refuses, on stderr, a principal that credentials issue, rotate or revoke (verb)
// changes nothing of: meshctl's own controller and system users (the controller is rotated by
// rotateController), and, but for revoke, any principal the mesh does not derive.
func (c credentialChange) checkIssuable(dir, verb string) bool {
	switch c.principal {
	case render.ControllerUser:
		c.e.errorf("the controller's credential is meshctl's own, in %s/controller.password, and is not %sd: replace it with 'meshctl credentials rotate controller'", c.st.Dir(), verb)
		return false
	case render.SystemUser:
		c.e.errorf("%s's password follows from the controller's and is not %sd: 'meshctl credentials rotate controller' replaces both", render.SystemUser, verb)
		return false
	}
	if verb == "revoke" {
		return true
	}
	if users := c.desired.Users(); !slices.Contains(users, c.principal) {
		hint := ""
		if s := model.Suggest(c.principal, users); s != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", s)
		}
		c.e.errorf("the mesh in %s derives no principal %q%s; principals are node.<node>, enrol.<node>, <node>.<module> and observer.<name>", dir, c.principal, hint)
		return false
	}
	return true
}

// startCredentialChange checks that the store may change a credential on the bus, then keeps
// every change of the store on the bus too until stop, which is nil for a store that never
// applied.
func startCredentialChange(ctx context.Context, e *env, m *model.Mesh, st *state.Store) (stop func(), code int) {
	// Before anything is minted or revoked: a store that does not manage the bus must change
	// nothing, neither the bus nor itself.
	if err := reconcile.CheckManager(ctx, m, st); err != nil {
		e.errorf("%v", err)
		return nil, exitError
	}
	// Nor may a credential issued or revoked here carry a change of bus.auth onto the bus:
	// that is an apply's, with --allow-reissue.
	if err := reconcile.CheckAuth(ctx, m, st); err != nil {
		e.errorf("%v", err)
		return nil, exitError
	}
	// Every change is kept on the bus too, before the command returns (restore.go). A store
	// that never applied has no controller to join as, and no copy on any bus yet.
	stop, err := reconcile.KeepOnBus(ctx, m, st)
	if err != nil && !errors.Is(err, state.ErrNoController) {
		e.errorf("%v", err)
		return nil, exitError
	}
	return stop, exitOK
}

// splitReplicaBehind separates a change the store took and its copy on the bus did not
// (behind) from an error that stopped the change. After behind the credential is what the
// command says, and it exits 2 all the same, since the bus could not rebuild it.
func splitReplicaBehind(err error) (behind, failed error) {
	if errors.Is(err, state.ErrReplicaBehind) {
		return err, nil
	}
	return nil, err
}

// issue refuses to mint a credential whose holder a password from here would lock out: an
// enrolled node's own and, unless rotated, one the controller hands out. Rotating the latter
// has the controller declare the new one; any other credential is minted here and its
// membership delivered.
func (c credentialChange) issue(ctx context.Context, req issueRequest) int {
	if node, enrolled, code := enrolledNode(ctx, c.e, c.st, c.desired, c.principal); code != exitOK {
		return code
	} else if enrolled {
		// A password minted here would replace the one the controller sealed to the node's
		// agent, which would be locked out at the reload with nothing said. The enrolled
		// node's credential is replaced only by enrolling it again, which the agent does
		// with its own key and hears the answer to.
		c.e.errorf("node %s enrolled: its agent holds the credential the controller sealed to it, and a password %s here would lock the agent out; to replace it, enrol the node again: 'meshctl credentials issue %s', then the agent enrols again with that credential",
			node, mintedHow(req.rotate), render.EnrolUser(node))
		return exitError
	}
	node, declared, code := declaredNode(ctx, c.e, c.st, c.m, c.principal)
	switch {
	case code != exitOK:
		return code
	case declared && !req.rotate:
		c.e.errorf("%s runs on node %s, which enrolled: the controller hands out its credential, sealed to the node, and would replace a password issued here at once; use 'meshctl credentials rotate %s'",
			c.principal, node, c.principal)
		return exitError
	case declared && req.out != "":
		c.e.errorf("%s's new credential goes to node %s sealed, never printed; -o writes nothing for it", c.principal, node)
		return exitError
	case declared:
		return rotateDeclared(ctx, c.e, c.st, c.m, c.principal, node)
	}
	return c.mintAndDeliver(ctx, req)
}

// mintAndDeliver mints the principal's new credential, makes it live, and delivers its
// membership once: to the -o file, claimed before minting, or on stdout.
func (c credentialChange) mintAndDeliver(ctx context.Context, req issueRequest) int {
	var file *membershipFile
	if req.out != "" {
		var err error
		if file, err = claimMembershipFile(req.out, req.force); err != nil {
			c.e.errorf("%v", err)
			return exitError
		}
	}
	// How the bus is recognised, read before minting: a CA file that cannot be read would
	// otherwise leave a minted credential with no membership to carry it.
	var reach busclient.Target
	if !c.m.Bus.Embedded() {
		var err error
		if reach, err = accounts.BusTarget(c.m); err != nil {
			if file != nil {
				file.abandon()
			}
			c.e.errorf("%v", err)
			return exitError
		}
	}
	p, _ := c.desired.Principal(c.principal)
	var minted map[string]string
	var err error
	if p.Nkey {
		minted, err = c.st.MintNkeys(ctx, []string{c.principal}, req.operation)
	} else {
		minted, err = c.st.Mint(ctx, []string{c.principal}, req.cost, req.operation)
	}
	behind, err := splitReplicaBehind(err)
	if err != nil {
		if file != nil {
			file.abandon()
		}
		c.e.errorf("%v", err)
		return exitError
	}
	live, partly := c.syncAccounts(ctx, "issue")
	secret := "password"
	if p.Nkey {
		secret = "seed"
	}
	line := membershipLine(c.membership(minted[c.principal], p.Nkey, reach))
	if file != nil {
		if werr := file.write(line); werr != nil {
			c.e.errorf("%s's credential is minted, but its membership could not be written to %s: %v; issue it again", c.principal, req.out, werr)
			return exitError
		}
		fmt.Fprintf(c.e.stderr, "%s's credential is minted; its membership, the only copy of its %s, is in %s (0600)\n", c.principal, secret, req.out)
	} else {
		fmt.Fprintf(c.e.stderr, "%s's credential is minted; the membership below is the only copy of its %s\n", c.principal, secret)
		_, _ = c.e.stdout.Write(line)
	}
	switch {
	case partly != nil:
		// Some servers of the cluster serve it: a host reaches the bus through those, and
		// only the others are the operator's to see to.
		fmt.Fprintf(c.e.stderr, "%s can log in through %s, but not yet through %s: fix what is said above, and the next apply brings the accounts config there\n", c.principal,
			strings.Join(partly.Serving, ", "), strings.Join(partly.Behind, ", "))
		return exitError
	case !live:
		// Written all the same, since the store keeps only the hash; but it is no working
		// credential until the server serves a config that carries it.
		fmt.Fprintf(c.e.stderr, "%s cannot log in yet: the server does not serve the config holding it; fix the server, then run apply\n", c.principal)
		return exitError
	}
	return replicaBehind(c.e, behind)
}

// revoke deletes the principal's credential and makes the accounts config without it live.
func (c credentialChange) revoke(ctx context.Context) int {
	had, err := c.st.Revoke(ctx, c.principal)
	behind, err := splitReplicaBehind(err)
	if err != nil {
		c.e.errorf("%v", err)
		return exitError
	}
	if !had {
		c.e.errorf("%s has no credential to revoke", c.principal)
		return exitError
	}
	if live, _ := c.syncAccounts(ctx, "revoke"); !live {
		return exitError
	}
	if node, declared, _ := declaredNode(ctx, c.e, c.st, c.m, c.principal); declared {
		fmt.Fprintf(c.e.stderr, "%s's credential is revoked: it can no longer log in; the controller declares the instance a new one, since the description puts it on node %s (remove it from the node there to lock it out)\n", c.principal, node)
		return replicaBehind(c.e, behind)
	}
	fmt.Fprintf(c.e.stderr, "%s is revoked: it can no longer log in\n", c.principal)
	return replicaBehind(c.e, behind)
}

// syncAccounts makes the accounts config that carries the change live, and says on stderr
// what it did, or that the change verb made is in the store but not yet live: on no server,
// or (partly) on some servers of a cluster and not the others.
func (c credentialChange) syncAccounts(ctx context.Context, verb string) (live bool, partly *accounts.PartlyServed) {
	what, err := reconcile.SyncAccounts(ctx, c.m, c.st)
	if errors.As(err, &partly) {
		c.e.errorf("the credential is %sd, but not every server serves the accounts config that carries it: %v", verb, err)
		return false, partly
	}
	if err != nil {
		// The store already holds the new state; the next apply or watch cycle installs it.
		c.e.errorf("the credential is %sd, but the accounts config could not be made live: %v", verb, err)
		return false, nil
	}
	fmt.Fprintln(c.e.stderr, what)
	return true, nil
}

// membership is the principal's membership with secret, its password or with nkey its seed:
// the address a host dials and the bus's fingerprint, on a bus of several servers every
// server, and from reach (the external bus as the description reaches it) the CA that
// verifies it and the client certificate's files.
func (c credentialChange) membership(secret string, nkey bool, reach busclient.Target) wire.Membership {
	t := busclient.Target{URL: busAddress(c.m, c.st.Dir()), Fingerprint: c.m.Bus.Fingerprint}
	if len(c.m.Bus.Servers) > 1 {
		// Every server, so a host reaches the bus through any of them; address stays the
		// first (the description's bus.url is its first server's), for a reader that knows
		// only it.
		var servers []busclient.Target
		for _, s := range c.m.Bus.Servers {
			servers = append(servers, busclient.Target{URL: s.URL, Fingerprint: s.Fingerprint})
		}
		t = busclient.Cluster(servers)
	}
	t.CA, t.CertFile, t.KeyFile = reach.CA, reach.CertFile, reach.KeyFile
	return host.MembershipOf(t, c.principal, secret, nkey)
}

// membershipLine is the membership as the one JSON line credentials issue prints. Its keys come
// sorted (address, fingerprint, password or seed, servers, user), the order of the line a host
// or a script reads, whatever order wire.Membership declares its fields in.
func membershipLine(mem wire.Membership) []byte {
	fields, _ := json.Marshal(mem)
	var byKey map[string]json.RawMessage
	_ = json.Unmarshal(fields, &byKey)
	line, _ := json.Marshal(byKey)
	return append(line, '\n')
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
