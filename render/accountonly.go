package render

import "bytes"

// The MESH account alone (bus.accounts: account).
//
// A server that also serves the operator's own accounts, or a system account of the
// operator's, cannot include a file holding the whole `accounts {}` block: a config has one
// such block. So the file can hold the MESH account alone, which the operator's block includes
// beside its own accounts:
//
//	accounts {
//	  OTHER { users: [...] }
//	  SYS { users: [...] }
//	  include "mesh-account.conf"
//	}
//	system_account: SYS
//
// It is the whole block's rendering without the line that opens the block and the line that
// closes it, the opening line replaced by a comment (accountOnlyNote): the two files have the
// same lines, so the server's parser names the same line of either, and one turns into the
// other exactly. Plans compare the whole block's rendering, whichever the file holds
// (WholeBlock); a file of the account alone carries no system user of meshctl's.

// accountOnlyNote stands where the whole block opens: a comment, so the server reads the
// account inside the block that includes the file.
const accountOnlyNote = "# The MESH account alone (bus.accounts: account): the server's config includes this file inside its own accounts { } block.\n"

// How the whole block opens and closes, each on a line of its own.
const (
	blockOpen  = "accounts {\n"
	blockClose = "}\n"
)

// AccountOnly is conf, a config AccountsConfig wrote (its comments ahead of it or not), as the
// MESH account alone. ok is false for anything else, and for a config carrying meshctl's
// system user, which is in another account than the mesh's.
func AccountOnly(conf []byte) ([]byte, bool) {
	i := afterComments(conf)
	rest, ok := bytes.CutPrefix(conf[i:], []byte(blockOpen))
	if !ok || !bytes.HasPrefix(rest, []byte("  "+Account+" {\n")) || !bytes.HasSuffix(rest, []byte(accountsEnd)) {
		return nil, false
	}
	out := make([]byte, 0, len(conf)-len(blockOpen)-len(blockClose)+len(accountOnlyNote))
	out = append(out, conf[:i]...)
	out = append(out, accountOnlyNote...)
	return append(out, rest[:len(rest)-len(blockClose)]...), true
}

// WholeBlock is text, a file AccountOnly wrote, as the whole block it was made from; ok is
// false for a file AccountOnly did not write.
func WholeBlock(text []byte) ([]byte, bool) {
	i := afterComments(text)
	head, ok := bytes.CutSuffix(text[:i], []byte(accountOnlyNote))
	if !ok || (len(head) > 0 && head[len(head)-1] != '\n') {
		return nil, false
	}
	out := make([]byte, 0, len(text)-len(accountOnlyNote)+len(blockOpen)+len(blockClose))
	out = append(out, head...)
	out = append(out, blockOpen...)
	out = append(out, text[i:]...)
	return append(out, blockClose...), true
}

// WithinAccounts is text, a file holding accounts alone, as the server reads it included
// inside an accounts block: a config the server's parser checks or reads users from on its
// own. A file AccountOnly wrote becomes its whole block; any other is wrapped on its first
// and after its last line, so a line the parser names is still that file's.
func WithinAccounts(text []byte) []byte {
	if whole, ok := WholeBlock(text); ok {
		return whole
	}
	out := make([]byte, 0, len(text)+len(blockOpen)+len(blockClose)+1)
	out = append(out, "accounts { "...)
	out = append(out, text...)
	return append(out, "\n"+blockClose...)
}

// afterComments is the index of text's first line that is not a comment, len(text) when
// every line is one.
func afterComments(text []byte) int {
	i := 0
	for i < len(text) && text[i] == '#' {
		end := bytes.IndexByte(text[i:], '\n')
		if end < 0 {
			return len(text)
		}
		i += end + 1
	}
	return i
}
