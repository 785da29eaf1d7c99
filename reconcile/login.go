package reconcile

import (
	"github.com/meshbus/meshctl/accounts"
	"github.com/meshbus/meshctl/render"
)

// knownToLetControllerIn reports whether conf, read from path, is the file meshctl last wrote
// there and carries the controller hash the store holds now. False means "not known", never
// "refused".
func (s *Session) knownToLetControllerIn(path string, conf []byte) bool {
	return s.knownDigestLetsControllerIn(path, render.Digest(conf))
}

// knownDigestLetsControllerIn is knownToLetControllerIn for the file at path whose digest
// is sum.
func (s *Session) knownDigestLetsControllerIn(path, sum string) bool {
	return accounts.KnownToAdmitController(s.Store, s.Accounts, path, sum)
}
