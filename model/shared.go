package model

import (
	"gopkg.in/yaml.v3"
)

// A bus shared with the operator's own accounts.
//
// By default meshctl writes the server's whole `accounts {}` block: the MESH account and, for a
// server reloaded by request, its own user in the system account. Nothing else can then sit in
// that block, so a server that also serves other accounts, or a system account of the
// operator's, cannot include it. With `bus.accounts: account` the file holds the MESH account
// alone, and the operator's config includes it inside its own accounts block beside its
// accounts; a server reloaded by request (reload: system) is then asked as the operator's own
// system user (bus.system_user), which meshctl never writes into any file.

// How much of the server's accounts config meshctl writes (bus.accounts).
const (
	// AccountsBlock is the whole `accounts {}` block (the default).
	AccountsBlock = "block"
	// AccountsAccount is the MESH account alone, included by the operator's accounts block.
	AccountsAccount = "account"
)

// accountsShapes are bus.accounts' words.
var accountsShapes = []string{AccountsBlock, AccountsAccount}

// SystemUser is the operator's user of the servers' system account (bus.system_user), which
// meshctl asks a server to reload as under bus.accounts: account. It names files, never a
// secret: the password (with User) or the nkey seed is read from its file at each reload.
type SystemUser struct {
	User         string
	PasswordFile string
	SeedFile     string
	Pos          Pos
}

// AccountOnly reports whether meshctl writes the MESH account alone (bus.accounts: account).
func (b Bus) AccountOnly() bool { return b.Accounts == AccountsAccount }

// MintsSystemUser reports whether the accounts config carries meshctl's own system user: some
// server is reloaded by request, and meshctl writes the whole accounts block (under
// bus.accounts: account the system user is the operator's, bus.system_user).
func (b Bus) MintsSystemUser() bool { return b.reloadsBySystem() && !b.AccountOnly() }

// reloadsBySystem reports whether some server of the bus is reloaded by a request.
func (b Bus) reloadsBySystem() bool {
	for _, s := range b.Servers {
		if s.Reload.System {
			return true
		}
	}
	return false
}

type rawSystemUser struct {
	user, passwordFile, seedFile name
	pos                          Pos
}

func (d *decoder) systemUser(n *yaml.Node) *rawSystemUser {
	f := d.section(n, systemUserSection)
	s := &rawSystemUser{pos: d.pos(n)}
	s.user, _ = d.optional(f, "user")
	s.passwordFile, _ = d.optional(f, "password_file")
	s.seedFile, _ = d.optional(f, "seed_file")
	return s
}

// validateSharedBus reads bus.accounts and bus.system_user into b, once the servers are read,
// and refuses what contradicts them.
func validateSharedBus(diags *diagnostics, rb *rawBus, b *Bus, external bool) {
	b.Accounts = AccountsBlock
	if rb.accounts.val != "" {
		b.Accounts = rb.accounts.val
	}
	if b.JWT() {
		if rb.accounts.val != "" {
			diags.add(rb.accounts.pos, "bus.accounts shapes the accounts file, and with bus.auth: jwt meshctl writes none: "+
				"the mesh is an account of the operator's, pushed to the servers' resolver (docs/operator-mode.md)")
		}
		if rb.systemUser != nil {
			diags.add(rb.systemUser.pos, "bus.system_user is for reload: system in file mode; with bus.auth: jwt the system user is bus.operator.system_creds")
		}
		return
	}
	if b.AccountOnly() && !external {
		diags.add(rb.accounts.pos, "bus.accounts: account is for an external bus (bus.url or bus.servers): "+
			"the embedded bus's config is meshctl's own, and holds the whole accounts block")
	}
	su := rb.systemUser
	if su == nil {
		if b.AccountOnly() && b.reloadsBySystem() {
			diags.add(rb.accounts.pos, "reload: system under bus.accounts: account asks the server as the operator's own "+
				"system user, which meshctl does not write: name it with bus.system_user (user and password_file, or seed_file)")
		}
		return
	}
	switch {
	case !b.AccountOnly():
		diags.add(su.pos, "bus.system_user is the operator's system user, for bus.accounts: account; with the whole "+
			"accounts block (the default) meshctl writes its own system user for reload: system")
	case external && !b.reloadsBySystem():
		diags.add(su.pos, "bus.system_user is only used to reload a server by request, and no server says reload: system")
	}
	switch {
	case su.passwordFile.val != "" && su.seedFile.val != "":
		diags.add(su.pos, "bus.system_user takes password_file or seed_file, not both")
	case su.seedFile.val != "" && su.user.val != "":
		diags.add(su.user.pos, "bus.system_user with seed_file is an nkey user, named by its key: leave out user")
	case su.passwordFile.val != "" && su.user.val == "":
		diags.add(su.pos, "bus.system_user with password_file needs user, the name the server's system account gives it")
	case su.passwordFile.val == "" && su.seedFile.val == "":
		diags.add(su.pos, "bus.system_user needs user and password_file, or seed_file (an nkey user's seed)")
	}
	b.SystemUser = &SystemUser{User: su.user.val, PasswordFile: su.passwordFile.val, SeedFile: su.seedFile.val, Pos: su.pos}
}

// SharesAlike reports whether b and o write the same shape of accounts config and reload as the
// same system user: a session opened for one serves the other only then.
func (b Bus) SharesAlike(o Bus) bool {
	if b.Accounts != o.Accounts || (b.SystemUser == nil) != (o.SystemUser == nil) {
		return false
	}
	return b.SystemUser == nil || *b.SystemUser == *o.SystemUser
}
