package testenv

import "testing"

func TestControllersFlag(t *testing.T) {
	for _, tc := range []struct {
		off  []string
		want string
	}{
		{off: []string{"deployment-controller"}, want: "*,-deployment-controller"},
		{off: []string{"deployment-controller", "replicaset-controller"}, want: "*,-deployment-controller,-replicaset-controller"},
	} {
		if got := controllersFlag(tc.off); got != tc.want {
			t.Errorf("controllersFlag(%q) = %q, want %q", tc.off, got, tc.want)
		}
	}
}
