package accounts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"

	"github.com/meshbus/meshctl/bus"
	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/internal/atomicfile"
	"github.com/meshbus/meshctl/render"
	"github.com/meshbus/meshctl/state"
)

// How meshctl knows the server serves the exact accounts file it wrote.
//
// A login as the controller after a reload proves little: the old config admits the
// controller too, so a reload the server refused — `config reload not supported for
// ServerName` after an operator edited the server's own config — looked like success while
// the server went on serving the old users. The server's config load time would say that some
// reload took, but an external server shows it only on a monitoring port meshctl may not
// reach, and not which file it read. So every accounts file meshctl writes carries one more
// user, the generation principal, whose password is new with each rendering and known only to
// whoever holds the controller's password, from which it is derived with the rendering's
// digest and the server's name (authority.go); the password of the file last written is kept
// in STATE/accounts.generation (0600) too. A login as it succeeds only against a file that
// carries its hash: no file of another rendering knows it. One login proves the rendering is
// live, on the embedded bus and on any external one, whatever reloads it.
//
// The principal may do nothing: it is denied publish and subscribe on ">", so its password
// guards no subject, and its hash is bcrypt at the minimum cost — a proof is one login, done
// on every plan, and a costly hash would make the server spend it each time for nothing.
// Its name starts with '_', which no mesh name can (model's names are [a-z][a-z0-9-]*), so
// it never meets a principal the mesh derives. It is added when the file is written and taken
// out when the file is read back, so a plan never sees it: a converged bus still plans
// nothing.

// GenerationUser is the generation principal's user name.
const GenerationUser = "_meshctl.generation"

// generationFile is where the generation of the last accounts file written is kept, in the
// state directory: for the single server of bus.url, and with the server's name after it for
// each server of a cluster (generationRecord), since each serves a file of its own.
const generationFile = "accounts.generation"

// generationRecord is the record's path in stateDir for the named server ("" for bus.url's).
func generationRecord(stateDir, server string) string {
	if server == "" {
		return filepath.Join(stateDir, generationFile)
	}
	safe := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, server)
	return filepath.Join(stateDir, generationFile+"."+safe)
}

// generation is the record of the last accounts file meshctl wrote: where, its SHA-256, and
// the generation principal's password in it.
type generation struct {
	// File is absolute in memory; on disk, relative to the state directory when it is in it.
	File     string `json:"file"`
	SHA256   string `json:"sha256"`
	Password string `json:"password"`
	// Controller is the controller's hash the file carries (controller.go), "" when it carries none.
	Controller string `json:"controller,omitempty"`
	// Rendered is the SHA-256 of the rendering the file was stamped from — the file without
	// its manager line and generation principal, what a plan compares — so that a plan of a
	// converged bus compares digests, and holds neither the file nor the rendering
	// (File.servedAsRendered). "" in a record written before it was kept.
	Rendered string `json:"rendered,omitempty"`
	// AccountOnly says the file holds the MESH account alone (File.AccountOnly).
	AccountOnly bool `json:"account_only,omitempty"`
}

// describes reports whether g is the record of exactly conf, written at path.
func (g generation) describes(path string, conf []byte) bool {
	return g.describesDigest(path, digest(conf))
}

// describesDigest is describes for the file at path whose digest is sum.
func (g generation) describesDigest(path, sum string) bool {
	return g.Password != "" && g.File == absPath(path) && g.SHA256 == sum
}

func digest(conf []byte) string { return render.Digest(conf) }

// FileDigest is the digest of the file at path, read through SHA-256 rather than whole; ok
// is false when there is no such file.
func FileDigest(path string) (sum string, ok bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", false, err
	}
	return hex.EncodeToString(h.Sum(nil)), true, nil
}

func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// loadGeneration reads the server's record in stateDir; ok is false when there is none (or it
// does not read back), which leaves the file on disk unproven, never wrongly proven.
func loadGeneration(stateDir, server string) (generation, bool) {
	data, err := os.ReadFile(generationRecord(stateDir, server))
	if err != nil {
		return generation{}, false
	}
	var g generation
	if json.Unmarshal(data, &g) != nil || g.Password == "" {
		return generation{}, false
	}
	if g.File != "" && !filepath.IsAbs(g.File) {
		g.File = filepath.Join(absPath(stateDir), g.File)
	}
	return g, true
}

// saveGeneration records g as the server's in stateDir (0600); the zero generation removes
// the record.
func saveGeneration(stateDir, server string, g generation) error {
	path := generationRecord(stateDir, server)
	if g == (generation{}) {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	// The embedded bus's file is in the state directory, and is named from it: a state
	// directory restored from a backup to another path still describes its own file, where
	// an absolute path read as a file edited by hand and rewrote it. An operator's server's
	// file, wherever it is, stays named absolutely.
	if rel, err := filepath.Rel(absPath(stateDir), g.File); err == nil && filepath.IsLocal(rel) {
		g.File = rel
	}
	data, err := json.Marshal(g)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, data); err != nil {
		return state.DiskError(fmt.Errorf("recording the accounts config's generation: %w", err), stateDir)
	}
	return nil
}

// generationBlock is how render writes the generation principal: the text between a
// rendering's users and its end, split around the hash. It is taken from render itself, so
// the block always reads as render writes users, and no second copy of the layout exists.
var generationBlock = sync.OnceValues(func() (layout, error) { return userBlock(GenerationUser) })

// userBlock is how render writes user's entry, split around its hash, and how a rendering ends.
func userBlock(user string) (layout, error) {
	const placeholder = "USER-HASH"
	empty := render.AccountsConfig(nil, nil)
	one := render.AccountsConfig([]render.Principal{{User: user}}, map[string]string{user: placeholder})
	// empty is head+tail, one is head+block+tail; any split of empty whose halves are a
	// prefix and a suffix of one inserts the block the same way.
	for k := min(len(empty), commonPrefix(empty, one)); k >= 0; k-- {
		tail := empty[k:]
		if bytes.HasSuffix(one, tail) && len(one) >= len(empty) {
			block := one[k : len(one)-len(tail)]
			before, after, ok := bytes.Cut(block, []byte(placeholder))
			if !ok {
				break
			}
			return layout{tail: tail, before: before, after: after}, nil
		}
	}
	return layout{}, fmt.Errorf("render's accounts layout has no place for the user %s", user)
}

type layout struct {
	tail          []byte // how every rendering ends, after its last user
	before, after []byte // the generation principal's block, around its hash
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// stamp returns a rendering with its generation principal added (its password derived from
// a's controller, authority.go), and a's manager line (ManagerLine) ahead of it, and the record
// of it for the file at a.Path. renderedDigest is the rendering's digest.
func (a File) stamp(rendered []byte, renderedDigest string) ([]byte, generation, error) {
	l, err := generationBlock()
	if err != nil {
		return nil, generation{}, err
	}
	if _, stamped := Unstamp(rendered); stamped || !bytes.HasSuffix(rendered, l.tail) {
		return nil, generation{}, errors.New("the accounts config to write is not a rendering of meshctl's")
	}
	password, err := generationPassword(a.controller, renderedDigest, a.Server, a.AccountOnly)
	if err != nil {
		return nil, generation{}, err
	}
	// Salted as every bcrypt hash: a password derived again is stamped with another hash, which
	// accepts it all the same.
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		return nil, generation{}, err
	}
	head := rendered[:len(rendered)-len(l.tail)]
	out := make([]byte, 0, len(a.Manager)+len(rendered)+len(l.before)+len(hash)+len(l.after))
	out = append(out, a.Manager...)
	out = append(out, head...)
	out = append(out, l.before...)
	out = append(out, hash...)
	out = append(out, l.after...)
	out = append(out, l.tail...)
	if a.AccountOnly {
		alone, ok := render.AccountOnly(out)
		if !ok {
			return nil, generation{}, errors.New("the accounts config to write carries more than the MESH account, which is all bus.accounts: account writes")
		}
		out = alone
	}
	return out, generation{File: absPath(a.Path), SHA256: digest(out), Password: password, Controller: controllerHashIn(rendered),
		Rendered: renderedDigest, AccountOnly: a.AccountOnly}, nil
}

// maxStampedHash bounds what Unstamp takes for the generation principal's hash: a bcrypt
// hash is 60 bytes.
const maxStampedHash = 1024

// Unstamp returns conf without its generation principal and its manager line — the rendering
// it was stamped from — and whether it carried a generation principal. A file of the MESH
// account alone gives the whole block it was made from (render.WholeBlock): what a plan
// compares either way.
func Unstamp(conf []byte) ([]byte, bool) {
	if whole, ok := render.WholeBlock(conf); ok {
		conf = whole
	}
	if _, rest, ok := CutManagerLine(conf); ok {
		conf = rest
	}
	l, err := generationBlock()
	if err != nil || !bytes.HasSuffix(conf, l.tail) {
		return conf, false
	}
	// The generation principal's entry is the last before the tail, and its hash a bcrypt
	// hash: it is looked for there, not back through the whole file, megabytes at scale.
	end := conf[max(0, len(conf)-len(l.tail)-len(l.after)-len(l.before)-maxStampedHash):]
	i := bytes.LastIndex(end, l.before)
	if i < 0 {
		return conf, false
	}
	i += len(conf) - len(end)
	rest := conf[i+len(l.before) : len(conf)-len(l.tail)]
	hash, found := bytes.CutSuffix(rest, l.after)
	if !found || bytes.ContainsAny(hash, "\"\\\n") {
		return conf, false
	}
	out := make([]byte, 0, i+len(l.tail))
	out = append(out, conf[:i]...)
	return append(out, l.tail...), true
}

// Entries splits an accounts file meshctl wrote into its users' entries, as render
// lays them out (render.SplitAccountsConfig), for the embedded bus's reload to parse only the
// entries that changed (bus.EmbeddedOptions.Entries). The manager line, a comment that names
// the time of each write, is left out of the text the entries stand in: it parses to nothing,
// and the text around the entries is the same from one write to the next without it. The
// generation principal is an entry like any other, new in each file.
func Entries(conf []byte) (bus.AccountsLayout, bool) {
	if _, rest, ok := CutManagerLine(conf); ok {
		conf = rest
	}
	s, ok := render.SplitAccountsConfig(conf)
	if !ok {
		return bus.AccountsLayout{}, false
	}
	l := bus.AccountsLayout{Head: s.Head, Tail: s.Tail, Entries: make([]bus.AccountsEntry, len(s.Entries))}
	for i, e := range s.Entries {
		l.Entries[i] = bus.AccountsEntry{Text: e.Text, User: e.User, Nkey: e.Nkey}
	}
	return l, true
}

// errNotServed is a proof that failed: the server answered, and the generation principal's
// password is not one it knows — it serves another file.
var errNotServed = errors.New("the server was not seen serving it")

// proveOnce logs in once as the generation principal of g.
func proveOnce(ctx context.Context, t busclient.Target, g generation) error {
	c, err := busclient.DialAlone(ctx, t, busclient.Credential{User: GenerationUser, Password: g.Password})
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) {
			return errNotServed
		}
		return err
	}
	// A server whose config names no user requires no authentication and lets any login in:
	// a login there proves no file, least of all one a reload it refused would have made live.
	open := !c.Conn.AuthRequired()
	c.Close()
	if open {
		return errNotServed
	}
	return nil
}

// ProofWait is how long a reload is given to take before it counts as refused. A reload by
// signal or command is asynchronous, and a server re-reading thousands of users takes well
// under a second; one that has not taken the file after this long has refused it (its log
// says why) or is not reloading at all. A variable only so that the tests of refusals need
// not wait it out.
var ProofWait = 10 * time.Second

// prove waits, up to within, until the server is seen serving g's file.
func prove(ctx context.Context, t busclient.Target, g generation, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		err := proveOnce(ctx, t, g)
		if err == nil {
			return nil
		}
		// A wrong certificate stays wrong: waiting would only hide it behind a timeout. A
		// connection dropped is retried: a server reloading its TLS settings closes
		// connections still in their handshake.
		var pin *busclient.FingerprintMismatchError
		if errors.As(err, &pin) {
			return err
		}
		select {
		case <-ctx.Done():
			if errors.Is(err, errNotServed) {
				return fmt.Errorf("%w within %s", err, within)
			}
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ServesRecorded waits, up to ProofWait, until the server is seen serving the file its
// generation record names: after a write, the file written; after a roll back, the previous one.
func (a File) ServesRecorded(ctx context.Context) error {
	g, _ := loadGeneration(a.StateDir, a.Server)
	return prove(ctx, a.Target, g, ProofWait)
}
