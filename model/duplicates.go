package model

import "slices"

// A name declared twice is reported once, at the later declaration in load order (files by
// name, then line). Which of the two is the mistake the model cannot know: a new file that
// sorts first makes the older declaration the later one. What it can do is not make matters
// worse: references to what either declaration offers resolve, so the one error is not
// followed by a false "nobody emits it" for every use of the declaration set aside.

// mergeDuplicateSeats lets references reach what a second declaration of a seat accepts,
// emits and serves, and the former names it lists.
func (ix *index) mergeDuplicateSeats() {
	for _, s := range ix.dupSeats {
		name := s.name.val
		quiet := &diagnostics{} // the duplicate is the error; its contents are not checked twice
		for _, a := range uniquePaths(quiet, s.accepts, "accept", "") {
			ix.seatAccepts[name][a] = true
		}
		for _, e := range uniquePaths(quiet, s.emits, "event", "") {
			ix.seatEvents[name][e] = true
		}
		for _, t := range uniquePaths(quiet, s.serves, "tool", "") {
			ix.seatTools[name][t] = true
		}
		for _, old := range s.formerly {
			if _, current := ix.seats[old.val]; current || !checkName(quiet, old, "") {
				continue
			}
			if _, taken := ix.formerly[old.val]; !taken {
				ix.formerly[old.val] = name
			}
		}
	}
}

// mergeDuplicateModules lets references reach what a second declaration of a module emits
// and serves.
func (ix *index) mergeDuplicateModules() {
	for name, mods := range ix.dupModules {
		quiet := &diagnostics{}
		for _, mod := range mods {
			for _, e := range uniquePaths(quiet, mod.emits, "event", "") {
				ix.modEvents[name][e] = true
			}
			for _, t := range uniquePaths(quiet, mod.serves, "tool", "") {
				ix.modTools[name][t] = true
			}
		}
	}
}

// moduleDecls returns every declaration of a module name: the one kept, then any
// duplicates, so a holder is checked against what any of them says.
func (ix *index) moduleDecls(name string) []*rawModule {
	return append([]*rawModule{ix.modules[name]}, ix.dupModules[name]...)
}

// runsOn reports whether any declaration of the module lists node in its `on`.
func (ix *index) runsOn(module, node string) bool {
	return slices.ContainsFunc(ix.moduleDecls(module), func(m *rawModule) bool {
		return slices.ContainsFunc(m.on, func(n name) bool { return n.val == node })
	})
}

// claims reports whether any declaration of the module claims seat (by any of its names).
func (ix *index) claims(module, seat string) bool {
	return slices.ContainsFunc(ix.moduleDecls(module), func(m *rawModule) bool {
		return slices.ContainsFunc(m.claims, func(n name) bool { s, _ := ix.seat(&diagnostics{}, n, ""); return s == seat })
	})
}
