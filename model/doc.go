// Package model loads the operator's description of a mesh — a directory of YAML kept in
// git — into a validated Mesh.
//
// It owns the YAML shape, every naming rule and every reference check, and it reports
// each problem with the file, line and column where the operator can fix it, all the
// problems of one load at once rather than the first. It does no I/O beyond reading
// the directory it is given, and it derives nothing about the bus: subjects, users and
// streams are the render package's job. What it does resolve is the meaning of the
// model itself — which module instance holds each seat, and which name a seat's former
// name now stands for — because both are decisions about the description, not about
// the bus.
//
// The bus section says which servers the mesh lives on and how meshctl reaches, writes and
// reloads each, and how much of a server's accounts config is meshctl's (bus.accounts,
// shared.go): the whole block, or the MESH account alone beside the operator's own accounts,
// whose system user (bus.system_user) is named by files, never by a secret in the description.
//
// The description is regular files inside one directory tree, the tree that is reviewed in
// git. Load reads *.yaml and *.yml files under the directory, skipping hidden directories
// and editors' backup files. What a description may not hold is refused by name, without
// being read:
//   - a symbolic link is followed only to a regular file inside the tree (not under a hidden
//     directory); a link out of the tree — to the controller's password, a private key,
//     /dev/zero — to a directory, or to nothing is refused, because what the mesh declares
//     must be what was reviewed, and skipping a linked directory would drop its declarations
//     (and an apply would delete what they describe);
//   - a FIFO, socket or device is refused without being opened: reading a FIFO waits for a
//     writer for ever;
//   - a file larger than MaxFileSize is refused before it is read;
//   - a name that is not printable text is refused at the directory holding it, since
//     printing it could forge a line of a log or a CI annotation.
//
// Errors quote what the description says through printable.Quote: cut to
// printable.MaxQuoted characters, control characters escaped, anything shaped like
// user:password@ redacted. A file whose top level is not a mapping is named with what it
// is (a string, a list), never its content: it may be a secret saved as .yaml. One load
// reports at most MaxDiagnostics problems, the first by position, and counts the rest.
package model
