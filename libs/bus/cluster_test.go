package bus_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
)

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// TestClusterLosesNoAckedMessageWhenAServerDies runs a 3-server JetStream
// cluster on loopback with an R3 stream, kills one server in the middle of
// publishing, and checks that every acknowledged message is stored once.
func TestClusterLosesNoAckedMessageWhenAServerDies(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	ports := freePorts(t, 6)
	var routes []string
	for i := 0; i < 3; i++ {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3+i]))
	}
	servers := make([]*server.Server, 3)
	for i := range servers {
		srv, err := startClusterServer(t, i, ports[i], ports[3+i], routes)
		if err != nil {
			t.Fatal(err)
		}
		servers[i] = srv
	}
	t.Cleanup(func() {
		for _, s := range servers {
			s.Shutdown()
		}
	})
	var urls []string
	for _, p := range ports[:3] {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		actx, acancel := context.WithTimeout(ctx, 3*time.Second)
		defer acancel()
		_, err := js.CreateOrUpdateStream(actx, jetstream.StreamConfig{
			Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3, Storage: jetstream.FileStorage, Duplicates: 5 * time.Minute,
		})
		assert.NoError(c, err, "create the R3 stream")
	}, 60*time.Second, 200*time.Millisecond)

	// Kill the stream leader: the hardest case, it forces an election.
	si, err := js.Stream(ctx, "R3")
	if err != nil {
		t.Fatal(err)
	}
	info, err := si.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := -1
	for i, s := range servers {
		if s.Name() == info.Cluster.Leader {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("stream leader %q not among servers", info.Cluster.Leader)
	}

	// Publish through a connection to the victim, so the kill also cuts the
	// publisher's connection mid-stream and it must fail over.
	order := append([]string{urls[victim]}, append(append([]string{}, urls[:victim]...), urls[victim+1:]...)...)
	pnc, err := nats.Connect(strings.Join(order, ","), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer pnc.Close()
	pjs, err := jetstream.New(pnc)
	if err != nil {
		t.Fatal(err)
	}

	const total, killAt = 2000, 700
	acked := map[string]bool{}
	retries := 0
	for i := 0; i < total; i++ {
		if i == killAt {
			servers[victim].Shutdown()
			t.Logf("killed %s (stream leader) after %d publishes", info.Cluster.Leader, i)
		}
		id := fmt.Sprintf("m-%05d", i)
		// A publish whose ack is lost is retried with the same id until acked.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			defer pcancel()
			_, err := pjs.Publish(pctx, "r3.msg", []byte(id), jetstream.WithMsgID(id))
			if !assert.NoError(c, err, "publish %s", id) {
				retries++
			}
		}, time.Minute, 50*time.Millisecond)
		acked[id] = true
	}
	t.Logf("published %d messages, %d retried publishes", len(acked), retries)

	// Read the stream back from the survivors, message by message.
	var last uint64
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		actx, acancel := context.WithTimeout(ctx, 3*time.Second)
		defer acancel()
		info, err := si.Info(actx)
		if assert.NoError(c, err, "stream info") {
			last = info.State.LastSeq
		}
	}, 30*time.Second, 200*time.Millisecond)
	seen := map[string]int{}
	for seq := uint64(1); seq <= last; seq++ {
		var msg *jetstream.RawStreamMsg
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			actx, acancel := context.WithTimeout(ctx, 3*time.Second)
			defer acancel()
			var err error
			msg, err = si.GetMsg(actx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return
			}
			assert.NoError(c, err, "get message %d", seq)
		}, 30*time.Second, 100*time.Millisecond)
		if msg != nil {
			seen[string(msg.Data)]++
		}
	}
	for id := range acked {
		if seen[id] == 0 {
			t.Errorf("acknowledged message %s lost", id)
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("message %s stored %d times", id, n)
		}
	}
}

func startClusterServer(t *testing.T, i, port, clusterPort int, routes []string) (*server.Server, error) {
	return bus.StartServer(bus.ServerOptions{
		Name:        fmt.Sprintf("n%d", i),
		StoreDir:    t.TempDir(),
		Listen:      true,
		Port:        port,
		ClusterName: "atoll-test",
		ClusterPort: clusterPort,
		Routes:      routes,
	})
}
