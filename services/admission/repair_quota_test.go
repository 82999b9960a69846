package admission_test

import (
	"context"
	"log/slog"
	"testing"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/admission"
)

// TestRepairReservesAWorkloadTheQuotaDropped: a workload whose
// reservation was released while its write was still under way (the
// quota service's orphan check, or admission's own restore after the
// caller gave up, both before a late write landed) is reserved again by
// the repair loop's check; a deleted workload is not, and a workload
// that is held is left alone.
func TestRepairReservesAWorkloadTheQuotaDropped(t *testing.T) {
	b := region(t)
	ctx := context.Background()
	a := admission.New(b, slog.Default(), nil)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop() })
	w := submit(t, b, opApp)
	held := used(t, b, "ops")
	if held.Pods != 2 {
		t.Fatalf("used %+v after the submit, want 2 pods", held)
	}
	// Held: the check changes nothing.
	if err := admission.RepairKey(ctx, a, w.Key()); err != nil {
		t.Fatal(err)
	}
	if got := used(t, b, "ops"); got != held {
		t.Fatalf("used %+v after checking a held workload, want %+v", got, held)
	}
	// Dropped, as the orphan check or a restore would.
	quotaCall(t, b, bus.QuotaRelease, api.QuotaRelease{Project: "ops", Key: w.Key()})
	if got := used(t, b, "ops"); got.Pods != 0 {
		t.Fatalf("used %+v after the release, want nothing", got)
	}
	if err := admission.RepairKey(ctx, a, w.Key()); err != nil {
		t.Fatal(err)
	}
	if got := used(t, b, "ops"); got != held {
		t.Errorf("used %+v after the repair, want %+v again", got, held)
	}
	// Deleted: released by the delete, and the check reserves nothing.
	if _, eb := call(t, b, bus.AdmissionDelete, []byte(`{"project":"ops","kind":"App","name":"web"}`), nil); eb != nil {
		t.Fatal(eb)
	}
	if err := admission.RepairKey(ctx, a, w.Key()); err != nil {
		t.Fatal(err)
	}
	if got := used(t, b, "ops"); got.Pods != 0 {
		t.Errorf("used %+v after repairing a deleted workload, want nothing", got)
	}
}
