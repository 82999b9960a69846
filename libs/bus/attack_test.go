package bus_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// The NATS attack test: what a service's user, holding its own
// credentials, could try against the data of the region or against
// another service's endpoints, and the server refuses.

// seed writes one key to every bucket, as the admin, and returns each
// bucket's revision of it.
func seed(t *testing.T, admin *bus.Bus) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	revs := map[string]uint64{}
	for _, kc := range bus.DefaultTopology(1).Buckets {
		kv, err := admin.KV(ctx, kc.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := kv.Put(ctx, "seed", []byte("keep me"))
		if err != nil {
			t.Fatalf("seed %s: %v", kc.Bucket, err)
		}
		revs[kc.Bucket] = rev
	}
	return revs
}

// kept checks that every bucket still holds its seed at the revision
// seed wrote, and nothing after it.
func kept(t *testing.T, admin *bus.Bus, revs map[string]uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for bucket, rev := range revs {
		kv, err := admin.KV(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, "seed")
		if err != nil {
			t.Errorf("bucket %s lost its seed: %v", bucket, err)
			continue
		}
		if e.Revision() != rev || string(e.Value()) != "keep me" {
			t.Errorf("bucket %s seed at revision %d (%q), want %d", bucket, e.Revision(), e.Value(), rev)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := st.Values(); n != 1 {
			t.Errorf("bucket %s holds %d messages, want its seed only", bucket, n)
		}
	}
}

// rollup publishes a rollup of scope ("all": the whole bucket, "sub": the
// key) to key of bucket, as a writer of the key would.
func rollup(ctx context.Context, js jetstream.JetStream, bucket, key, scope string) error {
	m := nats.NewMsg("$KV." + bucket + "." + key)
	m.Header.Set(jetstream.MsgRollup, scope)
	m.Data = []byte("wiped")
	_, err := js.PublishMsg(ctx, m)
	return err
}

// Every service's user, publishing Nats-Rollup: all (or sub) to a key of
// each bucket it may write, is refused by the server, and every bucket
// keeps what it held; so is the writer's purge of a key, and the admin's
// purge of a bucket's stream.
func TestNoServiceCanWipeABucket(t *testing.T) {
	r := startAuthRegion(t)
	revs := seed(t, r.admin)
	grants := bus.Grants()
	users := slices.Sorted(func(yield func(string) bool) {
		for u := range grants {
			if !yield(u) {
				return
			}
		}
	})
	attempts := 0
	for _, u := range users {
		b := r.as(t, u, "wipe-"+u)
		for _, w := range grants[u].Writes {
			for _, pattern := range w.Keys {
				key := concrete(pattern)
				for _, scope := range []string{jetstream.MsgRollupAll, jetstream.MsgRollupSubject} {
					t.Run(fmt.Sprintf("%s rollup %s on %s.%s", u, scope, w.Bucket, key), func(t *testing.T) {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer cancel()
						attempts++
						err := rollup(ctx, b.JS, w.Bucket, key, scope)
						var apiErr *jetstream.APIError
						if !errors.As(err, &apiErr) {
							t.Fatalf("rollup: %v, want the server's refusal", err)
						}
					})
				}
				t.Run(fmt.Sprintf("%s purges %s.%s", u, w.Bucket, key), func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					kv, err := b.KV(ctx, w.Bucket)
					if err != nil {
						t.Fatal(err)
					}
					if err := kv.Purge(ctx, key); err == nil {
						t.Fatal("purge of a key allowed, want refused")
					}
				})
			}
			t.Run(fmt.Sprintf("%s purges the stream of %s", u, w.Bucket), func(t *testing.T) {
				conn := "purge-" + u + "-" + w.Bucket
				c := r.as(t, u, conn)
				r.refused(t, conn, func(ctx context.Context) error {
					s, err := c.Stream(ctx, "KV_"+w.Bucket)
					if err != nil {
						return err
					}
					return s.Purge(ctx)
				})
			})
		}
	}
	if attempts == 0 {
		t.Fatal("no grant writes a bucket")
	}
	// Even the admin, who may publish anything, cannot purge a bucket.
	for bucket := range revs {
		t.Run("admin purges the stream of "+bucket, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := r.admin.Stream(ctx, "KV_"+bucket)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Purge(ctx); err == nil {
				t.Fatal("purge allowed, want refused")
			}
		})
	}
	kept(t, r.admin, revs)
}

// A bucket made by an older version (Key-Value defaults: rollups allowed,
// purges too, no size limit) is hardened by the next bootstrap, on its
// stream directly: afterwards a rollup is refused and the keys stay.
func TestBootstrapHardensOlderBuckets(t *testing.T) {
	dir := t.TempDir()
	srv, err := bus.StartServer(bus.ServerOptions{StoreDir: filepath.Join(dir, "js"), Listen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The older version's bucket, and the rollup it let through.
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketLeases, History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := kv.Put(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := rollup(ctx, js, bus.BucketLeases, "a", jetstream.MsgRollupAll); err != nil {
		t.Fatalf("the older bucket refused a rollup (%v): the test shows nothing", err)
	}
	if _, err := kv.Get(ctx, "b"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a rollup on the older bucket kept b (%v): the test shows nothing", err)
	}
	if _, err := kv.Put(ctx, "b", []byte("v")); err != nil {
		t.Fatal(err)
	}

	if err := bus.Bootstrap(ctx, bus.Config{URL: srv.ClientURL(), Name: "bootstrap", Logger: quiet, MaxBytes: map[string]int64{bus.BucketLeases: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "KV_"+bus.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if !cfg.DenyPurge || cfg.AllowRollup || cfg.MaxBytes != 1<<20 || cfg.MaxMsgsPerSubject != 1 {
		t.Errorf("after the bootstrap: deny purge %v, allow rollup %v, max bytes %d, history %d; want true, false, %d, 1",
			cfg.DenyPurge, cfg.AllowRollup, cfg.MaxBytes, cfg.MaxMsgsPerSubject, 1<<20)
	}
	if err := rollup(ctx, js, bus.BucketLeases, "a", jetstream.MsgRollupAll); err == nil {
		t.Error("a rollup after the bootstrap: allowed, want refused")
	}
	for _, k := range []string{"a", "b"} {
		if _, err := kv.Get(ctx, k); err != nil {
			t.Errorf("key %s after the refused rollup: %v", k, err)
		}
	}
	// Deleting a key, which needs no rollup, still works.
	if err := kv.Delete(ctx, "a"); err != nil {
		t.Errorf("delete after the bootstrap: %v", err)
	}
}

// The autoscaler, which may call admission only through its own endpoint,
// cannot pass as the gateway: a request to admission's operate with the
// gateway's reply prefix is refused by the server and reaches no handler;
// and the reply prefix it chooses does not change what its own endpoint
// lets it do.
func TestAutoscalerCannotPassAsTheGateway(t *testing.T) {
	r := startAuthRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := r.as(t, bus.UserAdmission, "admission")
	var operated, autoscaled atomic.Int32
	eps, err := adm.Serve(ctx, bus.ServeConfig{Name: bus.UserAdmission, Logger: quiet},
		bus.AdmissionOperate.Endpoint(5*time.Second, func(context.Context, api.Operation, micro.Request) (*api.Workload, error) {
			operated.Add(1)
			return &api.Workload{}, nil
		}),
		bus.AdmissionAutoscale.Endpoint(5*time.Second, func(context.Context, api.Operation, micro.Request) (*api.Workload, error) {
			autoscaled.Add(1)
			return &api.Workload{}, nil
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eps.Stop() })
	gw := r.as(t, bus.UserGateway, "gateway")
	gwReplies, err := gw.NC.SubscribeSync(bus.InboxPrefix(bus.UserGateway) + ".spoofed")
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	stop := []byte(`{"project":"p","kind":"App","name":"web","op":"stop"}`)

	t.Run("operate with the gateway's reply prefix", func(t *testing.T) {
		r.refused(t, "autoscaler-spoof", func(ctx context.Context) error {
			as := r.as(t, bus.UserAutoscaler, "autoscaler-spoof")
			m := &nats.Msg{Subject: bus.AdmissionOperate.Subject(), Reply: bus.InboxPrefix(bus.UserGateway) + ".spoofed", Data: stop,
				Header: nats.Header{bus.HeaderPrincipal: {"alice"}, bus.HeaderPlatformAdmin: {"true"}}}
			if err := as.NC.PublishMsg(m); err != nil {
				return err
			}
			if err := as.NC.FlushWithContext(ctx); err != nil {
				return err
			}
			// Published without a synchronous error: refused only if no
			// answer reaches the gateway's inbox.
			if _, err := gwReplies.NextMsg(500 * time.Millisecond); err == nil {
				return nil
			}
			return errors.New("no answer")
		})
	})
	t.Run("operate as itself", func(t *testing.T) {
		r.refused(t, "autoscaler-operate", request(r.as(t, bus.UserAutoscaler, "autoscaler-operate"), bus.AdmissionOperate.Subject()))
	})
	t.Run("its own endpoint with the gateway's reply prefix", func(t *testing.T) {
		as := r.as(t, bus.UserAutoscaler, "autoscaler-own")
		m := &nats.Msg{Subject: bus.AdmissionAutoscale.Subject(), Reply: bus.InboxPrefix(bus.UserGateway) + ".spoofed", Data: stop}
		if err := as.NC.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		reply, err := gwReplies.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		if code := reply.Header.Get(micro.ErrorCodeHeader); code != "403" {
			t.Errorf("answer %s %s, want 403", code, reply.Data)
		}
	})
	t.Run("the gateway calls the autoscaler's endpoint", func(t *testing.T) {
		r.refused(t, "gateway-autoscale", request(r.as(t, bus.UserGateway, "gateway-autoscale"), bus.AdmissionAutoscale.Subject()))
	})
	t.Run("its own endpoint", func(t *testing.T) {
		as := r.as(t, bus.UserAutoscaler, "autoscaler-call")
		reply, err := as.NC.RequestWithContext(ctx, bus.AdmissionAutoscale.Subject(), []byte(`{"project":"p","kind":"App","name":"web","op":"scale","replicas":2}`))
		if err != nil {
			t.Fatal(err)
		}
		if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
			t.Fatalf("answer %s %s, want the workload", code, reply.Data)
		}
	})
	if n := operated.Load(); n != 0 {
		t.Errorf("operate ran %d times, want never", n)
	}
	if n := autoscaled.Load(); n != 1 {
		t.Errorf("autoscale ran %d times, want once (the autoscaler's own call)", n)
	}
}
