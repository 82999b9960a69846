package bus_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/bus"
)

func TestOrderedQueueHandsOutBySortKey(t *testing.T) {
	// The sort key is the key's first letter: keys of the same letter go
	// in the order queued.
	q := bus.NewQueue(bus.Ordered(func(key string) string { return key[:1] }))
	for _, k := range []string{"c1", "a1", "b1", "a2", "c2", "a1"} {
		q.Add(k)
	}
	var (
		mu  sync.Mutex
		got []string
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q.Run(ctx, 1, slog.Default(), func(_ context.Context, key string) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, key)
		if len(got) == 5 {
			cancel()
		}
		return nil
	})
	want := []string{"a1", "a2", "b1", "c1", "c2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}
