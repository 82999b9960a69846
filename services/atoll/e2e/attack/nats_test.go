package attack

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/bus"
	"atoll.dev/services/atoll/e2e"
)

// The NATS attacks: a service's own user, with its own credentials, tries
// to wipe a bucket or pass as another service. Each attacker connects
// outside the region's connections, so that the permission violations it
// causes on purpose are this test's to check and not the region's audit,
// which fails the run on any.

// attacker is a raw NATS connection as one service's user, with the
// permission violations the server reported to it.
type attacker struct {
	nc *nats.Conn
	js jetstream.JetStream

	mu         sync.Mutex
	violations []string
}

func connectAttacker(t *testing.T, user string) *attacker {
	t.Helper()
	a := &attacker{}
	creds := reg.NATSAuth.CredentialsFile(user)
	nk, err := nats.NkeyOptionFromSeed(creds)
	if err != nil {
		t.Fatal(err)
	}
	opts := []nats.Option{nk, nats.CustomInboxPrefix(bus.InboxPrefix(user)), nats.Name("attack-" + user), nats.MaxReconnects(0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				a.mu.Lock()
				a.violations = append(a.violations, err.Error())
				a.mu.Unlock()
			}
		})}
	url := reg.Bus.ClientURL()
	if srv := reg.Bus.Server(); srv != nil {
		opts = append(opts, nats.InProcessServer(srv))
		url = srv.ClientURL()
	}
	a.nc, err = nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(a.nc.Close)
	if a.js, err = jetstream.New(a.nc); err != nil {
		t.Fatal(err)
	}
	return a
}

// violated waits for the server to report a permission violation on a
// subject containing what.
func (a *attacker) violated(t *testing.T, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		a.mu.Lock()
		found := slices.ContainsFunc(a.violations, func(v string) bool { return strings.Contains(v, what) })
		a.mu.Unlock()
		if found {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("no permission violation reported for %s", what)
}

// bucketKeys lists a bucket's keys, as the admin.
func bucketKeys(t *testing.T, ctx context.Context, bucket string) []string {
	t.Helper()
	kv, err := reg.Bus.KV(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	l, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	return keys
}

// keptKeys checks that every key of before is still in bucket.
func keptKeys(t *testing.T, ctx context.Context, bucket string, before []string) {
	t.Helper()
	after := bucketKeys(t, ctx, bucket)
	for _, k := range before {
		if !slices.Contains(after, k) {
			t.Errorf("bucket %s lost key %s", bucket, k)
		}
	}
}

// A service's user publishing Nats-Rollup: all to a key of a bucket it
// may write is refused by the server, and the bucket keeps its keys.
func TestNATSRollupOfABucketIsRefused(t *testing.T) {
	e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tests := []struct {
		user, bucket, key string
	}{
		{bus.UserPropagator, bus.BucketLeases, "propagator.attack"},
		{bus.UserScheduler, bus.BucketLeases, "scheduler"},
		{bus.UserUpgrade, bus.BucketDisruption, "d.attack"},
		{bus.UserAggregator, bus.BucketStatus, "attack.app.web"},
	}
	for _, tt := range tests {
		t.Run(tt.user+" "+tt.bucket, func(t *testing.T) {
			before := bucketKeys(t, ctx, tt.bucket)
			if tt.bucket == bus.BucketLeases && len(before) == 0 {
				t.Fatal("the region holds no lease: the test would show nothing")
			}
			a := connectAttacker(t, tt.user)
			m := nats.NewMsg("$KV." + tt.bucket + "." + tt.key)
			m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
			m.Data = []byte("wiped")
			_, err := a.js.PublishMsg(ctx, m)
			var apiErr *jetstream.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("rollup: %v, want the server's refusal", err)
			}
			keptKeys(t, ctx, tt.bucket, before)
		})
	}
}

// A service's user purging a bucket's stream is refused by its
// permissions, and even the admin's purge by the stream.
func TestNATSPurgeOfABucketIsRefused(t *testing.T) {
	e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := bucketKeys(t, ctx, bus.BucketLeases)
	a := connectAttacker(t, bus.UserPropagator)
	s, err := a.js.Stream(ctx, "KV_"+bus.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	if err := s.Purge(pctx); err == nil {
		t.Error("the propagator's purge: allowed, want refused")
	}
	a.violated(t, "STREAM.PURGE")
	admin, err := reg.Bus.Stream(ctx, "KV_"+bus.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Purge(ctx); err == nil {
		t.Error("the admin's purge: allowed, want refused")
	}
	keptKeys(t, ctx, bus.BucketLeases, before)
}

// The autoscaler's user, sending admission's operate a request with the
// gateway's reply prefix and identity headers, is refused by the server:
// nothing answers in the gateway's inbox, as nothing served it.
func TestNATSAutoscalerCannotPassAsTheGateway(t *testing.T) {
	e2e.Need(t)
	inbox := bus.InboxPrefix(bus.UserGateway) + ".attack"
	replies, err := gwBus.NC.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replies.Unsubscribe() })
	if err := gwBus.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	a := connectAttacker(t, bus.UserAutoscaler)
	m := &nats.Msg{
		Subject: bus.AdmissionOperate.Subject(), Reply: inbox,
		Data:   []byte(`{"project":"attack","kind":"App","name":"web","op":"stop"}`),
		Header: nats.Header{bus.HeaderPrincipal: {"admin"}, bus.HeaderPlatformAdmin: {"true"}},
	}
	if err := a.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	a.violated(t, bus.AdmissionOperate.Subject())
	if reply, err := replies.NextMsg(2 * time.Second); err == nil {
		t.Errorf("admission answered the spoofed request: %s", reply.Data)
	}
}
