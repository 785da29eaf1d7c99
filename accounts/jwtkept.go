package accounts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/meshbus/meshctl/busclient"
	"github.com/meshbus/meshctl/model"
	"github.com/meshbus/meshctl/render"
)

// FreshOperatorName is the name of the operator meshctl makes.
const FreshOperatorName = "MESHCTL"

// ErrNoOperatorYet is an external bus in operator mode with no bus.operator whose operator
// meshctl has not made yet: its servers must first be started on the config `meshctl render -o
// server` prints, which makes it.
var ErrNoOperatorYet = errors.New("meshctl has made no operator for this bus yet")

// KeptOperator reads the operator meshctl keeps in stateDir/nsc, making it first where there
// is none and mayMake says it may, under the apply lock that acquire takes: two first uses
// must not make two operators, and a store once made is never replaced (its keys are what
// the servers trust).
func KeptOperator(ctx context.Context, stateDir string, mayMake bool, acquire func(context.Context) error, logf func(string, ...any)) (Operator, error) {
	root := filepath.Join(stateDir, KeptOperatorDir)
	if !holdsOperator(root) {
		if !mayMake {
			return Operator{}, keptOperatorMissing(root)
		}
		if err := acquire(ctx); err != nil {
			return Operator{}, err
		}
		if !holdsOperator(root) { // or made by the holder waited for
			o, err := MakeOperator(root, FreshOperatorName, "")
			if err != nil {
				return Operator{}, err
			}
			logf("made operator %s (%s) and its account %s (%s) in %s; its seeds are the keys the bus trusts: keep them as the state directory is kept",
				o.Name, o.PublicKey, o.Account.Name, o.Account.PublicKey, root)
		}
	}
	return LoadOperator(model.Operator{Store: root})
}

// holdsOperator reports whether the store at root holds an operator.
func holdsOperator(root string) bool {
	entries, _ := os.ReadDir(filepath.Join(root, "stores"))
	return slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.IsDir() && !strings.HasPrefix(e.Name(), ".") })
}

func keptOperatorMissing(root string) error {
	return fmt.Errorf("%w: no operator in %s; `meshctl render -o server --state DIR` makes it and prints the servers' config (docs/operator-mode.md), "+
		"and on the embedded bus `meshctl apply` makes it", ErrNoOperatorYet, root)
}

// DialController connects to t as the controller with the creds file at path, read again at
// every connection: a reissue rewrites it before the push that cuts the connection.
func DialController(ctx context.Context, t busclient.Target, path string) (*busclient.Conn, error) {
	return busclient.Dial(ctx, t, CredsFileCredential(render.ControllerUser, path),
		nats.MaxReconnects(-1), nats.IgnoreAuthErrorAbort())
}
