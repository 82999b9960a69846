package admission_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/admission"
	"atoll.dev/services/quota"
)

// regionWithQuota starts the bus and the quota service; admission
// services are started by the test.
func regionWithQuota(t *testing.T) *bus.Bus {
	t.Helper()
	b, err := bus.Open(context.Background(), bus.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	q := quota.New(b, slog.Default(), quota.Ample())
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Stop() })
	return b
}

func startAdmission(t *testing.T, b *bus.Bus, crashed bool) *admission.Service {
	t.Helper()
	s := admission.New(b, slog.Default(), nil)
	if crashed {
		admission.Crash(s)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// count is the number of events the stream holds on subj. t is a test or
// the *assert.CollectT of a poll.
func count(t require.TestingT, b *bus.Bus, subj string) uint64 {
	s, err := b.JS.Stream(context.Background(), bus.StreamEvents)
	require.NoError(t, err, "events stream")
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subj))
	require.NoError(t, err, "events stream info")
	return info.State.Subjects[subj]
}

func doc(project, name string, replicas int) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},"spec":{"replicas":%d,"template":{"containers":[{"name":"a","image":"nginx"}]}}}`, project, name, replicas)
}

// A replica that dies between its write and its event: the next replica
// to run the repair publishes the event, once.
func TestEventOfACrashedWriteArrivesOnceAfterRestart(t *testing.T) {
	b := regionWithQuota(t)
	ctx := context.Background()
	subj := func(name, event string) string { return bus.EventSubject("crash", api.KindApp, name, event) }

	healthy := startAdmission(t, b, false)
	for _, name := range []string{"web", "gone"} {
		if _, err := healthy.Submit(ctx, doc("crash", name, 2), admission.Principal{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := healthy.Stop(); err != nil {
		t.Fatal(err)
	}

	// Each write of this replica is followed by its death.
	dying := startAdmission(t, b, true)
	if _, err := dying.Operate(ctx, api.Operation{Project: "crash", Kind: api.KindApp, Name: "web", Op: api.OpScale, Replicas: replicas(3)}, admission.Principal{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dying.Submit(ctx, doc("crash", "other", 1), admission.Principal{}); err != nil {
		t.Fatal(err)
	}
	if err := dying.Delete(ctx, "crash", api.KindApp, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := dying.Stop(); err != nil {
		t.Fatal(err)
	}
	lost := []string{subj("web", api.EventScaled), subj("other", api.EventAdmitted), subj("gone", api.EventDeleted)}
	for _, s := range lost {
		if n := count(t, b, s); n != 0 {
			t.Fatalf("%s: %d events before any repair, want 0", s, n)
		}
	}

	restarted := startAdmission(t, b, false)
	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, s := range lost {
			assert.Equal(c, uint64(1), count(c, b, s), "%s: events", s)
		}
	}, 20*time.Second, 20*time.Millisecond)
	t.Logf("every lost event published %v after the restart", time.Since(start).Round(time.Millisecond))

	// Repairing again, as a resync or another replica would, adds nothing.
	for _, key := range []string{api.Key("crash", api.KindApp, "web"), api.Key("crash", api.KindApp, "other"), api.Key("crash", api.KindApp, "gone")} {
		if err := admission.RepairKey(ctx, restarted, key); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]uint64{subj("web", api.EventAdmitted): 1, subj("gone", api.EventAdmitted): 1}
	for _, s := range lost {
		want[s] = 1
	}
	for s, n := range want {
		if got := count(t, b, s); got != n {
			t.Errorf("%s: %d events, want %d", s, got, n)
		}
	}
	// The repaired event is the one the writer would have published.
	st, err := b.JS.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, subj("web", api.EventScaled))
	if err != nil {
		t.Fatal(err)
	}
	if body := string(m.Data); !strings.Contains(body, `"generation":2`) || !strings.Contains(body, "replicas 2 -\\u003e 3") && !strings.Contains(body, "replicas 2 -> 3") {
		t.Errorf("repaired scaled event %s, want generation 2 and its message", body)
	}
}

// A write that reserved quota and then did not happen leaves the quota
// holding what the stored workload demands; so does one that lost a race
// and then happened.
func TestFailedWriteLeavesQuotaMatchingTheStoredWorkload(t *testing.T) {
	b := regionWithQuota(t)
	s := startAdmission(t, b, false)
	other := startAdmission(t, b, false)
	ctx := context.Background()
	scale := func(project string, n int32) api.Operation {
		return api.Operation{Project: project, Kind: api.KindApp, Name: "web", Op: api.OpScale, Replicas: replicas(n)}
	}
	tests := []struct {
		name  string
		write func(ctx context.Context, project string) error
		// race is the other replica's write that wins the first attempt (nil: none).
		race func(project string) error
		// succeeds: the write happens in the end (its context never ends).
		succeeds     bool
		wantReplicas int32
	}{
		{"update, context ends before the write", func(ctx context.Context, project string) error {
			_, err := s.Update(ctx, doc(project, "web", 5), admission.Principal{})
			return err
		}, nil, false, 2},
		{"scale, context ends before the write", func(ctx context.Context, project string) error {
			_, err := s.Operate(ctx, scale(project, 6), admission.Principal{})
			return err
		}, nil, false, 2},
		{"update, another replica wins the race and the context ends", func(ctx context.Context, project string) error {
			_, err := s.Update(ctx, doc(project, "web", 5), admission.Principal{})
			return err
		}, func(project string) error {
			_, err := other.Operate(ctx, scale(project, 4), admission.Principal{})
			return err
		}, false, 4},
		{"update, another replica wins the race, the retry writes", func(ctx context.Context, project string) error {
			_, err := s.Update(ctx, doc(project, "web", 5), admission.Principal{})
			return err
		}, func(project string) error {
			_, err := other.Operate(ctx, scale(project, 4), admission.Principal{})
			return err
		}, true, 5},
		{"stop, another replica wins the race and the context ends", func(ctx context.Context, project string) error {
			_, err := s.Operate(ctx, api.Operation{Project: project, Kind: api.KindApp, Name: "web", Op: api.OpStop}, admission.Principal{})
			return err
		}, func(project string) error {
			_, err := other.Operate(ctx, scale(project, 3), admission.Principal{})
			return err
		}, false, 3},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			project := fmt.Sprintf("drift%d", i)
			if _, err := s.Submit(ctx, doc(project, "web", 2), admission.Principal{}); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			attempts := 0
			admission.SetBeforeWrite(s, func(_ context.Context, _ string) {
				attempts++
				if attempts == 1 && tc.race != nil {
					if err := tc.race(project); err != nil {
						t.Errorf("the other replica's write: %v", err)
					}
					return
				}
				if !tc.succeeds {
					cancel()
				}
			})
			defer admission.SetBeforeWrite(s, nil)
			err := tc.write(wctx, project)
			var ae *admission.Error
			switch {
			case tc.succeeds && err != nil:
				t.Fatalf("write: %v", err)
			case !tc.succeeds && (!errors.As(err, &ae) || ae.Status != api.StatusUnavailable):
				t.Fatalf("write: %v, want 503 (its context ended)", err)
			}
			w := stored(t, b, api.Key(project, api.KindApp, "web"))
			if got := *w.Spec.(*api.AppSpec).Replicas; got != tc.wantReplicas {
				t.Fatalf("stored replicas %d, want %d", got, tc.wantReplicas)
			}
			if got, want := used(t, b, project), api.DemandOf(w); got != want {
				t.Errorf("quota holds %+v, the stored workload demands %+v", got, want)
			}
		})
	}
}

// A workload last written before the events stream's oldest event has
// had its event dropped with the stream's limits: the repair does not
// publish it again (an old admission as news, pushing out the next
// oldest once the stream is at its byte limit), while a write newer than
// the oldest event whose event was lost still gets it.
func TestRepairLeavesEventsTheStreamDropped(t *testing.T) {
	b := regionWithQuota(t)
	ctx := context.Background()
	subj := func(name string) string { return bus.EventSubject("aged", api.KindApp, name, api.EventAdmitted) }
	healthy := startAdmission(t, b, false)
	for _, name := range []string{"old", "newer"} {
		if _, err := healthy.Submit(ctx, doc("aged", name, 1), admission.Principal{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // "newer"'s event is stored after "old" was written
	}
	require.NoError(t, healthy.Stop())
	dying := startAdmission(t, b, true)
	if _, err := dying.Submit(ctx, doc("aged", "lost", 1), admission.Principal{}); err != nil {
		t.Fatal(err)
	}
	require.NoError(t, dying.Stop())

	// The stream drops "old"'s events, as its limits drop the oldest, long
	// after its duplicate window (shortened here: within it, the stream
	// would drop a second publication as a duplicate of the first anyway).
	s, err := b.JS.Stream(ctx, bus.StreamEvents)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.Duplicates = 100 * time.Millisecond
	_, err = b.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, s.Purge(ctx, jetstream.WithPurgeSubject(bus.EventSubject("aged", api.KindApp, "old", ">"))))
	require.Equal(t, uint64(0), count(t, b, subj("old")))
	time.Sleep(500 * time.Millisecond) // the ids of the first publications expire

	repairer := admission.New(b, slog.Default(), nil)
	for _, name := range []string{"old", "lost"} {
		require.NoError(t, admission.RepairKey(ctx, repairer, api.Key("aged", api.KindApp, name)))
	}
	assert.Equal(t, uint64(0), count(t, b, subj("old")), "an event older than the stream's oldest published again")
	assert.Equal(t, uint64(1), count(t, b, subj("lost")), "the lost write's event")
}
