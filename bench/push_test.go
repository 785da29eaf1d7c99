package main

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
)

// The push rows run end to end at a tiny size, so that they cannot rot: a cluster in operator
// mode, proven pushes with an empty and a non-empty revocation list, with a user on each server
// and with more, none of them dropped, and the rows' section of the report.
func TestThePushRowsRunAtATinySize(t *testing.T) {
	t.Parallel()
	plan := pushPlan{revocations: []int{0, 5}, connected: []int{3, 7}, pushes: 2, runs: 2}
	var log bytes.Buffer
	rep, err := measurePushes(t.Context(), plan, t.TempDir(), &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(rep.rows) != 4 {
		t.Fatalf("%d rows; want 4, one for each number of users and revocations", len(rep.rows))
	}
	for i, row := range rep.rows {
		if want := plan.connected[i/2]; row.connected != want {
			t.Errorf("row %d: %d users connected; want %d", i, row.connected, want)
		}
		if want := plan.revocations[i%2]; row.revocations != want {
			t.Errorf("row %d: %d revocations; want %d", i, row.revocations, want)
		}
		if got := len(row.push.times); got != plan.pushes*plan.runs || len(row.readBack.times) != got {
			t.Errorf("row %d: %d pushes and %d read-backs timed; want %d each", i, got, len(row.readBack.times), plan.pushes*plan.runs)
		}
		if len(row.pushCPU.times) != plan.runs || len(row.readBackCPU.times) != plan.runs {
			t.Errorf("row %d: the servers' CPU read for %d and %d batches; want %d", i, len(row.pushCPU.times), len(row.readBackCPU.times), plan.runs)
		}
		if row.dropped != 0 {
			t.Errorf("row %d: %d users dropped by pushes that revoke none of them", i, row.dropped)
		}
	}
	if empty, revoking := rep.rows[0].jwtBytes, rep.rows[1].jwtBytes; revoking <= empty {
		t.Errorf("the account JWT revoking 5 keys is %d bytes, revoking none %d", revoking, empty)
	}

	var b bytes.Buffer
	(&report{pushes: rep}).writePushes(&printer{w: &b})
	out := b.String()
	for _, want := range []string{"## Operator mode: what a push of the account JWT costs the servers", "\n| 7 | 5 | ",
		"bytes to the account JWT", "With an empty revocation list, each user connected adds", "With 5 revocations, each user connected adds"} {
		if !strings.Contains(out, want) {
			t.Errorf("the push section lacks %q:\n%s", want, out)
		}
	}
}

// The push rows need a user of the account on every server, and "none" skips them.
func TestThePushFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr bool
		rows    bool
	}{
		{[]string{"-push-connected", "2"}, true, false},
		{[]string{"-pushes", "0"}, true, false},
		{[]string{"-push-revocations", "-1"}, true, false},
		{[]string{"-push-revocations", "none"}, false, false},
		{[]string{"-push-revocations", "10,0,10", "-push-connected", "2000,3"}, false, true},
	} {
		f, err := parseFlags(tc.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := f.plan()
		if (err != nil) != tc.wantErr {
			t.Errorf("%v: error %v; want one: %v", tc.args, err, tc.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if got := len(plan.push.revocations) > 0; got != tc.rows {
			t.Errorf("%v: push rows planned %v; want %v", tc.args, got, tc.rows)
		}
		if tc.rows && (!slices.Equal(plan.push.revocations, []int{0, 10}) || !slices.Equal(plan.push.connected, []int{3, 2000})) {
			t.Errorf("%v: revocations %v and users %v; want each ascending, once", tc.args, plan.push.revocations, plan.push.connected)
		}
	}
}
