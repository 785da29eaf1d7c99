package bus

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/meshbus/meshctl/busclient"
)

// ServerLog is the embedded server's logger (EmbeddedOptions.Logger) writing to meshctl's
// structured log. Levels map as the operator needs them: the server's errors and warnings at
// their own level; its notices (the start-up banner, JetStream's limits, "Server is ready"),
// debug and trace at debug, since meshctl says in its own words when the bus starts and stops.
//
// A permission violation is handed to OnRefusal as a PermissionError and logged at debug only:
// a principal retrying a refused request would repeat one line many times a second, so the
// caller counts them and logs each distinct one once per interval, explained (watch does).
//
// A refused login of one of OwnLogins is logged at debug too: those are the users meshctl
// alone logs in as to prove which accounts config the server serves, whose logins are refused
// by design until a reload takes, and an operator's alert on errors must not fire on that.
//
// Principals names the nkey clients in the refusals it hands over (ParseServerViolation).
type ServerLog struct {
	Log        *slog.Logger
	OnRefusal  func(busclient.PermissionError)
	OwnLogins  []string
	Principals Principals
}

// Noticef logs the server's notices at debug.
func (l *ServerLog) Noticef(format string, v ...any) { l.log(slog.LevelDebug, format, v) }

// Warnf logs the server's warnings at warn.
func (l *ServerLog) Warnf(format string, v ...any) { l.log(slog.LevelWarn, format, v) }

// Fatalf logs at error: a fatal server error is returned by StartEmbedded, and must not exit.
func (l *ServerLog) Fatalf(format string, v ...any) { l.log(slog.LevelError, format, v) }

// Errorf logs the server's errors at error, but for permission violations (see ServerLog).
func (l *ServerLog) Errorf(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	if r, ok := ParseServerViolation(line, l.Principals); ok {
		if l.OnRefusal != nil {
			l.OnRefusal(r)
		}
		l.Log.Debug("bus: "+line, "part", "bus")
		return
	}
	if m := serverAuthFailureRe.FindStringSubmatch(line); m != nil && slices.Contains(l.OwnLogins, unquote(m[1])) {
		l.Log.Debug("bus: "+line, "part", "bus")
		return
	}
	l.Log.Error("bus: "+line, "part", "bus")
}

// The server's log line of a refused login (nats-server server/client.go authViolation), the
// only sign of whose it was: `… - authentication error - User "_meshctl.generation"`.
var serverAuthFailureRe = regexp.MustCompile(`authentication error - User ("(?:[^"\\]|\\.)*")$`)

// Debugf logs at debug.
func (l *ServerLog) Debugf(format string, v ...any) { l.log(slog.LevelDebug, format, v) }

// Tracef logs at debug.
func (l *ServerLog) Tracef(format string, v ...any) { l.log(slog.LevelDebug, format, v) }

func (l *ServerLog) log(level slog.Level, format string, v []any) {
	if ctx := context.Background(); l.Log.Enabled(ctx, level) {
		l.Log.Log(ctx, level, "bus: "+fmt.Sprintf(format, v...), "part", "bus")
	}
}

// The server's log line of a violation (nats-server server/client.go pubPermissionViolation,
// replySubjectViolation, subPermissionViolation), after the client's own prefix, which ends in
// the quoted "<account>/user:<user>" once the client has logged in — "<account>/nkey:<public
// key>" for an nkey user (client.go getAuthUserLabel):
//
//	127.0.0.1:40452 - cid:6 - "v1.55.0:go" - "MESH/user:two.shop" - Publish Violation - Subject "b.c"
//	… - "MESH/user:two.shop" - Subscription Violation - Subject "q.r", Queue: "grp", SID 1
//	… - "MESH/nkey:UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4" - Publish Violation - Subject "b.c"
var serverViolationRe = regexp.MustCompile(`("(?:[^"\\]|\\.)*") - (Publish|Subscription) Violation - (Subject|Reply) ("(?:[^"\\]|\\.)*")(?:, Queue: ("(?:[^"\\]|\\.)*"))?`)

// ParseServerViolation reads a permission violation from a line of the server's log, as the
// embedded server writes it and as an external server writes it to its log file. ok is false
// for any other line, and for a violation of a client that has not logged in as a user.
//
// The server names an nkey user by its public key; principals names it as the mesh does, so
// the refusal, the advice and the record of it all name the principal. A key principals does
// not know (or with nil principals) is named as the server labels it, `nkey:U…`: no
// principal, and no secret either.
func ParseServerViolation(line string, principals Principals) (r busclient.PermissionError, ok bool) {
	m := serverViolationRe.FindStringSubmatch(line)
	if m == nil {
		return busclient.PermissionError{}, false
	}
	user := userOf(unquote(m[1]), principals)
	if user == "" {
		return busclient.PermissionError{}, false
	}
	r = busclient.PermissionError{User: user, Op: busclient.OpPublish, Subject: unquote(m[4])}
	switch {
	case m[2] == "Subscription":
		r.Op = busclient.OpSubscribe
		if m[5] != "" {
			r.Queue = unquote(m[5])
		}
	case m[3] == "Reply":
		r.Op = busclient.OpReply
	}
	return r, true
}

// Principals maps an nkey user's public key to the principal it belongs to (state's
// NkeyPrincipals), ok false for a key it does not know.
type Principals func(publicKey string) (principal string, ok bool)

// userOf is the user a client's label ("<account>/user:<user>", "<account>/nkey:<key>")
// names, "" for one that has not logged in as either.
func userOf(label string, principals Principals) string {
	if _, user, found := strings.Cut(label, "/user:"); found {
		return user
	}
	_, key, found := strings.Cut(label, "/nkey:")
	if !found || key == "" {
		return ""
	}
	if principals != nil {
		if p, ok := principals(key); ok {
			return p
		}
	}
	return "nkey:" + key
}

// unquote reads a quoted name from a server's log line, or returns it as it stands.
func unquote(s string) string {
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return s
}
