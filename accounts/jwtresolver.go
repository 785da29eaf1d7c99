package accounts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meshbus/meshctl/internal/backoff"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// DefaultWait is how long a Resolver waits for the last server's answer when its Wait is
// unset: a running server answers in milliseconds, so a server silent this long is down or
// cut off.
const DefaultWait = 5 * time.Second

// ErrPushIncomplete is a push that a server named refused or did not answer: that server may
// serve the JWT it held before until its resolver catches up or the next push reaches it.
var ErrPushIncomplete = errors.New("not every server stored the account JWT")

// ErrStillConnected is a revoked user that a server still counts connected, or a server that
// did not say.
var ErrStillConnected = errors.New("the revoked user is not proven disconnected on every server")

// Resolver is the servers' NATS resolver as meshctl reaches it: a connection of a
// system-account user, and the names of the servers that must answer. Every server answers a
// request on the system account's subjects, so a request gathers one reply per server; the
// names say whose reply is missing, which no reply can.
type Resolver struct {
	Conn    *nats.Conn
	Servers []string
	// Wait bounds how long a request waits for the last server named; 0 is DefaultWait.
	Wait time.Duration
	// MaxPayload is the least max_payload the servers named announce (INFO max_payload),
	// learnt by a connection to each; 0 where none was asked, and then Conn's server's is
	// taken. A push is one message, which a server refuses past its max_payload.
	MaxPayload int64
}

// Limit is the longest account JWT the servers take, in bytes: the least of the 1 MiB jwt/v2
// decodes, MaxPayload, and the max_payload of the server Conn is connected to.
func (r Resolver) Limit() int64 {
	if mp := r.maxPayload(); mp > 0 {
		return min(jwt.MaxTokenSize, mp)
	}
	return jwt.MaxTokenSize
}

// maxPayload is the least max_payload known of the servers, 0 where none is.
func (r Resolver) maxPayload() int64 {
	mp := r.MaxPayload
	if r.Conn != nil && r.Conn.MaxPayload() > 0 && (mp == 0 || r.Conn.MaxPayload() < mp) {
		mp = r.Conn.MaxPayload()
	}
	return mp
}

// PushState is what one server did with a pushed JWT.
type PushState string

const (
	// Stored: the server stored the JWT and applied it to the account if loaded.
	Stored PushState = "stored"
	// Refused: the server answered with an error.
	Refused PushState = "refused"
	// NoAnswer: the server did not answer within the wait.
	NoAnswer PushState = "no answer"
)

// PushReply is one server's answer to a push.
type PushReply struct {
	Server string
	State  PushState
	// Message is the server's error when it refused.
	Message string
}

// PushResult is every server's answer to a push of account Account's JWT: one for each server
// named, in their order, then any other server that answered, by name.
type PushResult struct {
	Account string
	Replies []PushReply
}

// Err is nil when every server named stored the JWT, and otherwise an ErrPushIncomplete that
// names each server that did not and why.
func (p PushResult) Err() error {
	var bad []string
	for _, r := range p.Replies {
		switch r.State {
		case Refused:
			bad = append(bad, fmt.Sprintf("%s refused it: %s", r.Server, r.Message))
		case NoAnswer:
			bad = append(bad, r.Server+" did not answer")
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("pushing account %s: %w: %s", p.Account, ErrPushIncomplete, strings.Join(bad, "; "))
}

// Push sends accountJWT to every server's resolver on $SYS.REQ.ACCOUNT.<account>.CLAIMS.UPDATE
// and gathers each server's answer. A JWT that would do harm (Encode's checks: JetStream
// storage, an operator's signature) or does not fit Limit is refused before anything is
// sent. A server that stores the JWT applies it before it answers, but one that does not
// trust its signer still answers that it stored it: Status says whether each server holds it.
func (r Resolver) Push(ctx context.Context, accountJWT string) (PushResult, error) {
	c, err := checkPushable(accountJWT, r.Limit(), r.maxPayload())
	if err != nil {
		return PushResult{}, err
	}
	res := PushResult{Account: c.Subject}
	got, err := r.gather(ctx, "$SYS.REQ.ACCOUNT."+c.Subject+".CLAIMS.UPDATE", []byte(accountJWT))
	for _, name := range names(r, got) {
		reply := PushReply{Server: name, State: NoAnswer}
		if data, ok := got[name]; ok {
			var resp struct {
				Data *struct {
					Code int `json:"code"`
				} `json:"data"`
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			switch {
			case json.Unmarshal(data, &resp) != nil:
				reply.State, reply.Message = Refused, "an answer that does not parse"
			case resp.Error != nil:
				reply.State, reply.Message = Refused, resp.Error.Description
			case resp.Data == nil || resp.Data.Code != 200:
				reply.State, reply.Message = Refused, "an answer without code 200"
			default:
				reply.State = Stored
			}
		}
		res.Replies = append(res.Replies, reply)
	}
	if err != nil {
		return res, fmt.Errorf("pushing account %s: %w", c.Subject, err)
	}
	return res, nil
}

// HeldState is how the JWT a server applies compares with the one pushed.
type HeldState string

const (
	// Current: the server applies the JWT pushed.
	Current HeldState = "current"
	// Behind: the server applies an older JWT (an earlier iat).
	Behind HeldState = "behind"
	// Diverged: the server applies another JWT as new as the one pushed, or newer.
	Diverged HeldState = "diverged"
	// Unread: the server answered without a JWT of the account. It answers so when the
	// account is not loaded there (no client and no stream of it): it holds the JWT only in
	// its resolver directory, which it reads when the account is next used.
	Unread HeldState = "unread"
	// Unanswered: the server did not answer within the wait.
	Unanswered HeldState = "no answer"
)

// Held is one server's JWT of the account.
type Held struct {
	Server   string
	State    HeldState
	IssuedAt int64
	ID       string
	// Message is the server's error when it answered without a JWT.
	Message string

	token string
}

// Status is each server's JWT of the account, compared with one pushed: one for each server
// named, in their order, then any other server that answered, by name.
type Status []Held

// Behind names the servers that apply an older JWT than the one compared with.
func (s Status) Behind() []string { return s.servers(Behind) }

// NotCurrent names every server that is not shown to apply the JWT compared with.
func (s Status) NotCurrent() []string {
	var names []string
	for _, h := range s {
		if h.State != Current {
			names = append(names, h.Server)
		}
	}
	return names
}

func (s Status) servers(state HeldState) []string {
	var names []string
	for _, h := range s {
		if h.State == state {
			names = append(names, h.Server)
		}
	}
	return names
}

// Status reads, through $SYS.REQ.SERVER.PING.ACCOUNTZ, the JWT each server applies to the
// account of accountJWT, and compares it with accountJWT by ID and iat. The JWT read is the
// one the server applies, not merely the one it stored: a server that stored a JWT it does
// not trust shows the JWT before.
func (r Resolver) Status(ctx context.Context, accountJWT string) (Status, error) {
	pushed, err := jwt.DecodeAccountClaims(accountJWT)
	if err != nil {
		return nil, fmt.Errorf("reading the account JWT: %w", err)
	}
	held, err := r.held(ctx, pushed.Subject)
	st := r.compare(pushed, held)
	if err != nil {
		return st, fmt.Errorf("reading account %s on each server: %w", pushed.Subject, err)
	}
	return st, nil
}

// compare is each server's JWT of held compared with pushed.
func (r Resolver) compare(pushed *jwt.AccountClaims, held map[string]Held) Status {
	var st Status
	for _, name := range names(r, held) {
		h, ok := held[name]
		if !ok {
			st = append(st, Held{Server: name, State: Unanswered})
			continue
		}
		h.Server = name
		switch {
		case h.Message != "":
			h.State = Unread
		case h.ID == pushed.ID:
			h.State = Current
		case h.IssuedAt < pushed.IssuedAt:
			h.State = Behind
		default:
			h.State = Diverged
		}
		st = append(st, h)
	}
	return st
}

// Held is the newest JWT of account that a server applies, by iat ("" when none does), and
// each server's JWT compared with it. A server that has not loaded the account is made to
// load it first: a CONNZ request for the account looks it up, which reads the JWT from the
// server's resolver directory.
func (r Resolver) Held(ctx context.Context, account string) (string, Status, error) {
	held, err := r.held(ctx, account)
	if err == nil && anyUnread(held) {
		r.load(ctx, account)
		held, err = r.held(ctx, account)
	}
	var newest *jwt.AccountClaims
	var token string
	for _, name := range names(r, held) {
		h, ok := held[name]
		if !ok || h.token == "" {
			continue
		}
		if newest == nil || h.IssuedAt > newest.IssuedAt {
			if c, derr := jwt.DecodeAccountClaims(h.token); derr == nil {
				newest, token = c, h.token
			}
		}
	}
	if err != nil {
		return token, nil, fmt.Errorf("reading account %s on each server: %w", account, err)
	}
	if newest == nil {
		return "", nil, nil
	}
	return token, r.compare(newest, held), nil
}

// Prove reads each server's JWT of the account of accountJWT until every server named
// applies it or the wait ends, loading the account on a server that has not (Held), and
// returns the last reading; ErrPushIncomplete names each server not shown to apply it.
func (r Resolver) Prove(ctx context.Context, accountJWT string) (Status, error) {
	c, err := jwt.DecodeAccountClaims(accountJWT)
	if err != nil {
		return nil, fmt.Errorf("reading the account JWT: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, r.wait())
	defer cancel()
	var st Status
	backoff.Retry(wctx, backoff.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}, func() bool {
		var serr error
		st, serr = r.Status(wctx, accountJWT)
		if serr == nil && len(st.NotCurrent()) == 0 {
			return true
		}
		if len(st.servers(Unread)) > 0 {
			r.load(wctx, c.Subject)
		}
		return false
	})
	if ctx.Err() != nil {
		return st, ctx.Err()
	}
	var bad []string
	for _, h := range st {
		if slices.Contains(r.Servers, h.Server) && h.State != Current {
			bad = append(bad, h.Server+" ("+string(h.State)+")")
		}
	}
	for _, name := range r.Servers {
		if !slices.ContainsFunc(st, func(h Held) bool { return h.Server == name }) {
			bad = append(bad, name+" (no answer)")
		}
	}
	if len(bad) > 0 {
		return st, fmt.Errorf("account %s's JWT %s: %w: not applied on %s", c.Subject, c.ID, ErrPushIncomplete, strings.Join(bad, ", "))
	}
	return st, nil
}

// load has every server look the account up, which loads it from the server's resolver
// directory where no client or stream of it did yet.
func (r Resolver) load(ctx context.Context, account string) {
	body, err := json.Marshal(map[string]string{"acc": account})
	if err == nil {
		_, _ = r.gather(ctx, "$SYS.REQ.SERVER.PING.CONNZ", body)
	}
}

func anyUnread(held map[string]Held) bool {
	for _, h := range held {
		if h.Message != "" {
			return true
		}
	}
	return false
}

// held is the JWT of account each server that answers applies, or its error; token is the
// JWT itself, for a caller that compares it whole.
func (r Resolver) held(ctx context.Context, account string) (map[string]Held, error) {
	body, err := json.Marshal(map[string]string{"account": account})
	if err != nil {
		return nil, err
	}
	got, err := r.gather(ctx, "$SYS.REQ.SERVER.PING.ACCOUNTZ", body)
	held := map[string]Held{}
	for name, data := range got {
		var resp struct {
			Data *struct {
				Account *struct {
					JWT string `json:"jwt"`
				} `json:"account_detail"`
			} `json:"data"`
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		var h Held
		switch {
		case json.Unmarshal(data, &resp) != nil:
			h.Message = "an answer that does not parse"
		case resp.Error != nil:
			h.Message = resp.Error.Description
		case resp.Data == nil || resp.Data.Account == nil || resp.Data.Account.JWT == "":
			h.Message = "an answer without the account's JWT"
		default:
			if c, err := jwt.DecodeAccountClaims(resp.Data.Account.JWT); err != nil {
				h.Message = "a JWT that does not decode: " + err.Error()
			} else {
				h.IssuedAt, h.ID, h.token = c.IssuedAt, c.ID, resp.Data.Account.JWT
			}
		}
		held[name] = h
	}
	return held, err
}

// UserConnections counts, on each server, the open connections of user (a public key) in
// account, through $SYS.REQ.SERVER.PING.CONNZ; a server that did not answer is absent.
func (r Resolver) UserConnections(ctx context.Context, account, user string) (map[string]int, error) {
	body, err := json.Marshal(map[string]string{"acc": account, "user": user})
	if err != nil {
		return nil, err
	}
	got, err := r.gather(ctx, "$SYS.REQ.SERVER.PING.CONNZ", body)
	counts := map[string]int{}
	for name, data := range got {
		var resp struct {
			Data *struct {
				NumConns int `json:"num_connections"`
			} `json:"data"`
		}
		if json.Unmarshal(data, &resp) == nil && resp.Data != nil {
			counts[name] = resp.Data.NumConns
		}
	}
	return counts, err
}

// RevokeUser revokes user (a public key) in the account: it encodes the account's JWT as the
// successor of previous with the user revoked as of now, pushes it, and waits until every
// server named counts no connection of the user. A server disconnects a revoked user's
// connections when it applies the JWT. It returns the JWT pushed, which the caller keeps as
// the next one's previous, even when the revocation is not proven.
func (r Resolver) RevokeUser(ctx context.Context, a Account, signer nkeys.KeyPair, previous, user string, now time.Time) (string, PushResult, error) {
	if !nkeys.IsValidPublicUserKey(user) {
		return "", PushResult{}, fmt.Errorf("revoking %q: not a user public key", user)
	}
	token, err := a.Encode(signer, previous, now, user)
	if err != nil {
		return "", PushResult{}, fmt.Errorf("revoking user %s: %w", user, err)
	}
	res, err := r.Push(ctx, token)
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		return token, res, fmt.Errorf("revoking user %s: %w", user, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.wait())
	defer cancel()
	var connected []string
	proven := backoff.Retry(ctx, backoff.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}, func() bool {
		counts, _ := r.UserConnections(ctx, a.PublicKey, user)
		connected = connected[:0]
		for _, name := range r.Servers {
			if n, ok := counts[name]; !ok {
				connected = append(connected, name+" (no answer)")
			} else if n > 0 {
				connected = append(connected, fmt.Sprintf("%s (%d connections)", name, n))
			}
		}
		return len(connected) == 0
	})
	if !proven {
		return token, res, fmt.Errorf("revoking user %s: %w: %s", user, ErrStillConnected, strings.Join(connected, ", "))
	}
	return token, res, nil
}

func (r Resolver) wait() time.Duration {
	if r.Wait > 0 {
		return r.Wait
	}
	return DefaultWait
}

// names are the servers named, then any other that answered, by name.
func names[V any](r Resolver, answered map[string]V) []string {
	names := slices.Clone(r.Servers)
	var others []string
	for name := range answered {
		if !slices.Contains(names, name) {
			others = append(others, name)
		}
	}
	slices.Sort(others)
	return append(names, others...)
}

// gather sends a request on the system account and collects one reply per server, by the
// server name each reply carries, until every server named has answered or the wait ends.
// The wait ending is no error: the servers missing are the answer. The caller's ctx ending
// is.
func (r Resolver) gather(ctx context.Context, subject string, body []byte) (map[string][]byte, error) {
	if r.Conn == nil {
		return nil, errors.New("no system-account connection")
	}
	if len(r.Servers) == 0 {
		return nil, errors.New("no server named: nobody could say which server did not answer")
	}
	wctx, cancel := context.WithTimeout(ctx, r.wait())
	defer cancel()
	inbox := r.Conn.NewInbox()
	sub, err := r.Conn.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := r.Conn.PublishRequest(subject, inbox, body); err != nil {
		return nil, err
	}
	got := map[string][]byte{}
	for !r.allAnswered(got) {
		msg, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			if ctx.Err() != nil {
				return got, ctx.Err()
			}
			if wctx.Err() != nil {
				return got, nil
			}
			return got, err
		}
		var from struct {
			Server struct {
				Name string `json:"name"`
			} `json:"server"`
		}
		if json.Unmarshal(msg.Data, &from) != nil || from.Server.Name == "" {
			continue
		}
		if _, seen := got[from.Server.Name]; !seen {
			got[from.Server.Name] = msg.Data
		}
	}
	return got, nil
}

func (r Resolver) allAnswered(got map[string][]byte) bool {
	for _, name := range r.Servers {
		if _, ok := got[name]; !ok {
			return false
		}
	}
	return true
}
