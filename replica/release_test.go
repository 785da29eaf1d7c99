package replica

import "testing"

func TestOlderReleases(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"2.10.27", "2.11.0", true},
		{"2.11.0", "2.11.0", false},
		{"2.11.0-RC.1", "2.11.0", true},
		{"2.15.2", "2.11.0", false},
		{"2.9.99", "2.11.0", true},
		{"3.0.0", "2.11.0", false},
		{"v2.10.1", "2.11.0", true},
		{"nonsense", "2.11.0", false},
	} {
		if got := older(c.a, c.b); got != c.want {
			t.Errorf("older(%q, %q) = %v; want %v", c.a, c.b, got, c.want)
		}
	}
}
