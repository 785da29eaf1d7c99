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
package model
