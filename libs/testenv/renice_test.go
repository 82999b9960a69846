package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAutogroupOf(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, want string
	}{
		{"group", "/autogroup-42 nice 0\n", "/autogroup-42"},
		{"reniced", "/autogroup-7 nice 10\n", "/autogroup-7"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := autogroupOf(p); got != tc.want {
				t.Errorf("autogroupOf(%q) = %q, want %q", tc.content, got, tc.want)
			}
		})
	}
	if got := autogroupOf(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("missing file: %q, want empty", got)
	}
}

// The caller's own group is never reniced: a process of its session shares
// it, and lowering it would lower the caller.
func TestReniceLeavesTheCallersGroup(t *testing.T) {
	own := autogroupOf("/proc/self/autogroup")
	if own == "" {
		t.Skip("no autogroup scheduling here")
	}
	before, err := os.ReadFile("/proc/self/autogroup")
	if err != nil {
		t.Fatal(err)
	}
	// Renicing this process lowers its main thread only (the package's
	// other tests do not mind); its group must stay as it was.
	if err := renice(os.Getpid(), 5); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile("/proc/self/autogroup")
	if string(after) != string(before) {
		t.Errorf("own autogroup changed: %q -> %q", before, after)
	}
}
