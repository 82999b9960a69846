package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
)

func openBus(t *testing.T) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, bus.Config{StoreDir: t.TempDir(), Name: t.Name()})
	if err != nil {
		t.Fatalf("open bus: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

func TestOpenCreatesTopology(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	topo := bus.DefaultTopology(1)
	for _, s := range topo.Streams {
		if _, err := b.JS.Stream(ctx, s.Name); err != nil {
			t.Errorf("stream %s: %v", s.Name, err)
		}
	}
	for _, k := range topo.Buckets {
		if _, err := b.KV(ctx, k.Bucket); err != nil {
			t.Errorf("bucket %s: %v", k.Bucket, err)
		}
	}
}

func TestSubjects(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{bus.EventSubject("search", "App", "web", "admitted"), "atoll.evt.search.app.web.admitted"},
		{bus.ClusterSubject("zone-a-1", "unhealthy"), "atoll.cluster.zone-a-1.unhealthy"},
		{bus.NodeSubject("zone-a-1", "node-7", "notready"), "atoll.node.zone-a-1.node-7.notready"},
		{bus.AuditSubject("search", "create"), "atoll.audit.search.create"},
		{bus.DeadLetterSubject("ATOLL_EVENTS", "scheduler"), "atoll.dlq.ATOLL_EVENTS.scheduler"},
		{bus.MsgID("search/app/web", 7), "search/app/web@7"},
		{parsed(bus.ParseMsgID("p.app.web.admitted@12")), "p.app.web.admitted 12 true"},
		{parsed(bus.ParseMsgID("no-revision")), " 0 false"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func parsed(key string, rev uint64, ok bool) string { return fmt.Sprint(key, " ", rev, " ", ok) }

func TestRetriedPublishIsDeduplicated(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	subj := bus.EventSubject("p", "App", "web", "admitted")
	first, err := b.Publish(ctx, subj, "p/app/web@1", []byte("one"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The same message again, as a client does after a lost ack.
	retry, err := b.Publish(ctx, subj, "p/app/web@1", []byte("one"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || !retry.Duplicate {
		t.Errorf("duplicate flags: first=%v retry=%v, want false, true", first.Duplicate, retry.Duplicate)
	}
	if retry.Sequence != first.Sequence {
		t.Errorf("retry stored at seq %d, first at %d", retry.Sequence, first.Sequence)
	}
	if _, err := b.Publish(ctx, subj, "p/app/web@2", []byte("two"), nil); err != nil {
		t.Fatal(err)
	}
	s, err := b.JS.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("stream holds %d messages, want 2", info.State.Msgs)
	}
}

func TestFailingHandlerBacksOffThenDeadLetters(t *testing.T) {
	b := openBus(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	backoff := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	const maxDeliver = 4
	var (
		mu    sync.Mutex
		times []time.Time
	)
	c, err := b.Consume(ctx, bus.ConsumerSpec{
		Stream:         bus.StreamEvents,
		Durable:        "flaky",
		FilterSubjects: []string{"atoll.evt.p.>"},
		AckWait:        10 * time.Second,
		MaxDeliver:     maxDeliver,
		Backoff:        backoff,
	}, func(ctx context.Context, msg jetstream.Msg) error {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		return errors.New("downstream unavailable")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()

	dlq, err := b.JS.OrderedConsumer(ctx, bus.StreamDeadLetter, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, bus.EventSubject("p", "App", "web", "admitted"), "m1", []byte("payload"), nil); err != nil {
		t.Fatal(err)
	}
	dead, err := dlq.Next(jetstream.FetchMaxWait(15 * time.Second))
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	if got, want := dead.Subject(), bus.DeadLetterSubject(bus.StreamEvents, "flaky"); got != want {
		t.Errorf("dead letter subject %q, want %q", got, want)
	}
	h := dead.Headers()
	if h.Get(bus.HeaderDLQDelivered) != strconv.Itoa(maxDeliver) || h.Get(bus.HeaderDLQSubject) != "atoll.evt.p.app.web.admitted" ||
		h.Get(bus.HeaderDLQError) != "downstream unavailable" || string(dead.Data()) != "payload" {
		t.Errorf("dead letter headers %v data %q", h, dead.Data())
	}

	// No delivery beyond MaxDeliver, even after waiting longer than the last backoff.
	require.Never(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(times) > maxDeliver
	}, time.Second, 10*time.Millisecond, "a delivery beyond MaxDeliver")
	mu.Lock()
	defer mu.Unlock()
	if len(times) != maxDeliver {
		t.Fatalf("handler ran %d times, want %d", len(times), maxDeliver)
	}
	for i := 1; i < len(times); i++ {
		gap := times[i].Sub(times[i-1])
		floor := time.Duration(float64(backoff[i-1]) * 0.8) // jitter is ±20%
		if gap < floor {
			t.Errorf("redelivery %d came after %v, want at least %v", i, gap, floor)
		}
	}
}

func TestPermanentErrorDeadLettersAtOnce(t *testing.T) {
	b := openBus(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	c, err := b.Consume(ctx, bus.ConsumerSpec{Stream: bus.StreamEvents, Durable: "strict", MaxDeliver: 5},
		func(ctx context.Context, msg jetstream.Msg) error {
			calls.Add(1)
			return fmt.Errorf("decode: %w", bus.ErrPermanent)
		})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if _, err := b.Publish(ctx, bus.EventSubject("p", "App", "x", "admitted"), "x1", []byte("{"), nil); err != nil {
		t.Fatal(err)
	}
	dlq, err := b.JS.OrderedConsumer(ctx, bus.StreamDeadLetter, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dlq.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

func TestCompareAndSet(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	kv, err := b.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	rev1, err := bus.CompareAndSet(ctx, kv, "p.app.web", []byte("v1"), 0)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	rev2, err := bus.CompareAndSet(ctx, kv, "p.app.web", []byte("v2"), rev1)
	if err != nil {
		t.Fatalf("update at current revision: %v", err)
	}
	tests := []struct {
		name string
		rev  uint64
	}{
		{"create of an existing key", 0},
		{"update at a stale revision", rev1},
		{"update at a future revision", rev2 + 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bus.CompareAndSet(ctx, kv, "p.app.web", []byte("lost"), tc.rev)
			if !errors.Is(err, bus.ErrConflict) {
				t.Fatalf("got %v, want ErrConflict", err)
			}
		})
	}
	e, err := kv.Get(ctx, "p.app.web")
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Value()) != "v2" {
		t.Errorf("value %q after lost races, want v2", e.Value())
	}
}

func TestUpdateRetriesLostRaces(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	kv, err := b.KV(ctx, bus.BucketQuota)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := 0; w < writers; w++ {
		wg.Go(func() {
			for i := 0; i < each; i++ {
				_, err := bus.Update(ctx, kv, "counter", func(cur []byte, exists bool) ([]byte, error) {
					n := 0
					if exists {
						n, _ = strconv.Atoi(string(cur))
					}
					return []byte(strconv.Itoa(n + 1)), nil
				})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	e, err := kv.Get(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(e.Value()); got != strconv.Itoa(writers*each) {
		t.Errorf("counter = %s, want %d (an increment was lost)", got, writers*each)
	}
	// ErrNoChange writes nothing.
	rev, err := bus.Update(ctx, kv, "counter", func([]byte, bool) ([]byte, error) { return nil, bus.ErrNoChange })
	if !errors.Is(err, bus.ErrNoChange) || rev != e.Revision() {
		t.Errorf("no-change update: rev %d err %v, want rev %d ErrNoChange", rev, err, e.Revision())
	}
}

// A service's own connection reaches the same buckets and subjects, and
// closing it leaves the region's connection and server running.
func TestConnectSharesTheSystem(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	c, err := b.Connect("svc")
	if err != nil {
		t.Fatal(err)
	}
	if c.NC == b.NC {
		t.Fatal("Connect returned the same connection")
	}
	kv, err := c.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "p.app.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !c.NC.IsClosed() || b.NC.IsClosed() {
		t.Fatalf("closed: child %v, parent %v; want child only", c.NC.IsClosed(), b.NC.IsClosed())
	}
	pkv, err := b.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	e, err := pkv.Get(ctx, "p.app.a")
	if err != nil || string(e.Value()) != "x" {
		t.Fatalf("parent reads %v, %v after the child closed; want x", e, err)
	}
}

// Update ends without writing when its mutator fails or its context ends
// while it keeps losing races.
func TestUpdateEnds(t *testing.T) {
	b := openBus(t)
	kv, err := b.KV(context.Background(), bus.BucketQuota)
	if err != nil {
		t.Fatal(err)
	}
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		timeout time.Duration
		fn      func(calls int) ([]byte, error)
		want    error
		calls   func(n int) bool
	}{
		{"a mutator error aborts at once", time.Minute, func(int) ([]byte, error) { return nil, errBoom }, errBoom,
			func(n int) bool { return n == 1 }},
		{"a context ending while every race is lost", 300 * time.Millisecond, func(int) ([]byte, error) {
			// Another writer wins each time: the key moves under us.
			if _, err := kv.Put(context.Background(), "contended", []byte("theirs")); err != nil {
				return nil, err
			}
			return []byte("ours"), nil
		}, context.DeadlineExceeded, func(n int) bool { return n > 3 && n < bus.UpdateAttempts }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			calls := 0
			_, err := bus.Update(ctx, kv, "contended", func([]byte, bool) ([]byte, error) {
				calls++
				return tc.fn(calls)
			})
			if !errors.Is(err, tc.want) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
			if !tc.calls(calls) {
				t.Errorf("mutator ran %d times", calls)
			}
			if e, err := kv.Get(context.Background(), "contended"); err == nil && string(e.Value()) == "ours" {
				t.Error("a failed Update wrote its value")
			}
		})
	}
}

func TestCompareAndDeleteReportsTheDeletion(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	kv, err := b.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "p.app.web", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.CompareAndDelete(ctx, b.JS, kv, "p.app.web", rev+5); !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("delete at a wrong revision: %v, want ErrConflict", err)
	}
	del, err := bus.CompareAndDelete(ctx, b.JS, kv, "p.app.web", rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "p.app.web"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("after delete: %v, want not found", err)
	}
	h, err := kv.History(ctx, "p.app.web")
	if err != nil {
		t.Fatal(err)
	}
	last := h[len(h)-1]
	if last.Operation() != jetstream.KeyValueDelete || last.Revision() != del {
		t.Errorf("last entry %v@%d, want a delete marker at %d", last.Operation(), last.Revision(), del)
	}
	st, err := b.LastEntry(ctx, bus.BucketWorkloads, "p.app.web")
	if err != nil || st.Op != jetstream.KeyValueDelete || st.Revision != del {
		t.Errorf("LastEntry: %+v %v, want the delete marker at %d", st, err, del)
	}
	if _, err := b.LastEntry(ctx, bus.BucketWorkloads, "p.app.never"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("LastEntry of a key never written: %v, want ErrKeyNotFound", err)
	}
}

// TestLatest reads a key from its stream's leader: the value and revision
// written last, and not found once the key is deleted or never written.
func TestLatest(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	kv, err := b.KV(ctx, bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "p.app.web", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "p.app.web", []byte("v2"))
	if err != nil {
		t.Fatal(err)
	}
	v, got, err := b.Latest(ctx, bus.BucketWorkloads, "p.app.web")
	if err != nil || string(v) != "v2" || got != rev {
		t.Errorf("Latest: %q@%d %v, want v2@%d", v, got, err, rev)
	}
	if _, err := bus.CompareAndDelete(ctx, b.JS, kv, "p.app.web", rev); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"p.app.web", "p.app.never"} {
		if _, _, err := b.Latest(ctx, bus.BucketWorkloads, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("Latest of %s: %v, want ErrKeyNotFound", key, err)
		}
	}
}
