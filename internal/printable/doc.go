// Package printable makes text that came from outside meshctl — a subject or a user name the
// bus reported, a name in the description, a line of a server's log, a field of the store —
// safe to print on a terminal or in a log. It owns the one escaping every command's text
// output uses; it must not quote, cut or redact (model.Quote does that for values a message
// quotes, with the same escapes), nor touch the text meshctl writes itself, such as colours.
package printable
