package scheduler_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/events"
	"atoll.dev/services/scheduler"
)

// phaseLog records, per workload key, the reconcile phases logged.
type phaseLog struct {
	mu     sync.Mutex
	phases map[string][]string // mu must be held
}

func (l *phaseLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *phaseLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *phaseLog) WithGroup(string) slog.Handler            { return l }

func (l *phaseLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "reconcile phase" || r.Level != slog.LevelDebug {
		return nil
	}
	var key, phase string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "key":
			key = a.Value.String()
		case "phase":
			phase = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.phases[key] = append(l.phases[key], phase)
	return nil
}

func (l *phaseLog) of(key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.phases[key])
}

// TestReconcileLogsItsPhases: a new workload's first reconcile goes
// through the named phases in order, each logged at debug level with its
// key; a kind the scheduler does not place (a Scaler) stops after read
// and gets no placement.
func TestReconcileLogsItsPhases(t *testing.T) {
	b := openBus(t)
	seedClusters(t, b)
	pub := events.NewPublisher(b, nil, events.Options{})
	every := []string{"read", "gate", "decide", "after-decide", "write", "announce"}
	scaler := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindScaler,
		Metadata: api.Metadata{Project: "p", Name: "web", Generation: 1, Created: time.Now().UTC()},
		Spec:     &api.ScalerSpec{Target: "web"}}
	tests := []struct {
		name   string
		w      *api.Workload
		want   []string
		placed bool
	}{
		{"App", tieredApp("web", api.TierOnDemand, 2, 0), every, true},
		{"Scaler", scaler, []string{"read"}, false},
	}
	keys := make([]string, len(tests))
	for i, tc := range tests {
		keys[i] = write(t, b, pub, tc.w)
	}
	logs := &phaseLog{phases: map[string][]string{}}
	conn, err := b.Connect("scheduler")
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	s := scheduler.New(conn, slog.New(logs))
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, workloadEvents(t, b, api.EventScheduled), 1)
		for _, k := range keys {
			assert.Contains(c, logs.of(k), "read")
		}
	}, 15*time.Second, 20*time.Millisecond)

	placed := placements(t, b)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := logs.of(keys[i])
			from := slices.Index(got, "read")
			if diff := cmp.Diff(tc.want, got[from:min(from+len(every), len(got))]); diff != "" {
				t.Errorf("phases of the first reconcile of %s (-want +got):\n%s", keys[i], diff)
			}
			if _, ok := placed[keys[i]]; ok != tc.placed {
				t.Errorf("%s placed: %v, want %v", keys[i], ok, tc.placed)
			}
		})
	}
}
