package propagator

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// TestDesiredKeepsDecodedDocumentsOnlyWithAShard: the desired state of a
// placement without a shard (most of a large region's: stopped and
// pending workloads) keeps no decoded workload, which would make most of
// the heap every collection scans; one with a shard keeps it, and renders.
func TestDesiredKeepsDecodedDocumentsOnlyWithAShard(t *testing.T) {
	b := openBus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wkv, err := b.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	pkv, err := b.KV(ctx, bus.BucketPlacements)
	require.NoError(t, err)
	put := func(w *api.Workload, shards ...api.Shard) {
		body, err := json.Marshal(w)
		require.NoError(t, err)
		_, err = wkv.Put(ctx, w.Key(), body)
		require.NoError(t, err)
		body, err = json.Marshal(api.PlacementDecision{Key: w.Key(), Generation: w.Metadata.Generation, Shards: shards})
		require.NoError(t, err)
		_, err = pkv.Put(ctx, w.Key(), body)
		require.NoError(t, err)
	}
	placed, stopped := app("placed", 2), app("stopped", 2)
	put(placed, api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 2})
	put(stopped)

	s := newService(b, quietLog(), nil)
	if s.workloads, err = b.Mirror(ctx, bus.BucketWorkloads, nil); err == nil {
		s.placements, err = b.Mirror(ctx, bus.BucketPlacements, nil)
	}
	require.NoError(t, err)
	<-s.workloads.Ready()
	<-s.placements.Ready()

	tests := []struct {
		w         *api.Workload
		withShard bool
	}{
		{placed, true},
		{stopped, false},
	}
	for _, tt := range tests {
		t.Run(tt.w.Metadata.Name, func(t *testing.T) {
			d, err := s.desiredFor(tt.w.Key())
			require.NoError(t, err)
			assert.Equal(t, tt.withShard, d.workload != nil, "decoded workload kept")
			assert.Equal(t, tt.withShard, d.shard("zone-a") != nil, "shard in zone-a")
			assert.Equal(t, tt.withShard, d.announcer() != "", "announcer")
			if tt.withShard {
				h, err := d.hash("zone-a")
				require.NoError(t, err)
				assert.NotEmpty(t, h)
			}
			again, err := s.desiredFor(tt.w.Key())
			require.NoError(t, err)
			assert.Same(t, d, again, "an unchanged key is not decoded again")
		})
	}
}
