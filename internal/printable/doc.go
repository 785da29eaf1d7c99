// Package printable makes text that came from outside meshctl — a subject or a user name the
// bus reported, a value of the description, a line of a server's log, a field of the store —
// safe to print on a terminal or in a log. It owns the one escaping every command's output
// uses, in two forms: Text escapes what a command prints as it is (a cell of a table, a log
// line), and Quote also quotes, cuts and redacts a value a message names. It must not touch
// the text meshctl writes itself, such as colours.
package printable
