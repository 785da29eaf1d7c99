package testnats

import "os"

// OtherGroup is a group id the test may give a file that is not the process's own — a server
// run as a user of its own reads its accounts file through such a group: any id as root,
// otherwise a supplementary group of the process. Without one the test is skipped.
func OtherGroup(tb TB) int {
	tb.Helper()
	if os.Geteuid() == 0 {
		return os.Getegid() + 4242
	}
	groups, _ := os.Getgroups()
	for _, g := range groups {
		if g != os.Getegid() {
			return g
		}
	}
	tb.Skip("the test process belongs to no group but its own, so no file can be given another")
	return 0
}
