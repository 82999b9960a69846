package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
)

// authCluster is a 3-server NATS cluster on loopback with the region's
// users, and an admin bus connected to each server alone (index i: server
// i), from which services connect as their users to that server.
type authCluster struct {
	servers []*server.Server
	auth    *bus.Auth
	admins  []*bus.Bus
	seen    *violations
}

func startAuthCluster(t *testing.T) *authCluster {
	t.Helper()
	auth, err := bus.CreateAuth(filepath.Join(t.TempDir(), "creds"))
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 6)
	var routes, urls []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3+i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	c := &authCluster{auth: auth, seen: &violations{byConn: map[string][]string{}}}
	for i := range 3 {
		srv, err := bus.StartServer(bus.ServerOptions{
			Name: fmt.Sprintf("n%d", i), StoreDir: t.TempDir(), Listen: true, Port: ports[i],
			ClusterName: "atoll-test", ClusterPort: ports[3+i], Routes: routes, Auth: auth,
		})
		if err != nil {
			t.Fatal(err)
		}
		c.servers = append(c.servers, srv)
	}
	t.Cleanup(func() {
		for _, s := range c.servers {
			s.Shutdown()
		}
	})
	require.Eventually(t, func() bool {
		return !slices.ContainsFunc(c.servers, func(s *server.Server) bool { return s.NumRoutes() < 2 })
	}, 20*time.Second, 50*time.Millisecond, "the cluster's routes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := auth.CredentialsFile(bus.UserAdmin)
	if err := bus.Bootstrap(ctx, bus.Config{URL: strings.Join(urls, ","), NKeyFile: admin, Name: "bootstrap", Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	for i, u := range urls {
		b, err := bus.Open(ctx, bus.Config{URL: u, NKeyFile: admin, Name: fmt.Sprintf("admin-n%d", i), SkipEnsure: true, Logger: slog.New(c.seen)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		c.admins = append(c.admins, b)
	}
	return c
}

// as connects as user to server i (and, once it is gone, to the others
// the cluster tells of), under a connection name of its own.
func (c *authCluster) as(t *testing.T, i int, user, conn string) *bus.Bus {
	t.Helper()
	b, err := c.admins[i].ConnectAs(conn, c.auth.CredentialsFile(user))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(b.Close)
	if got, want := b.NC.ConnectedServerName(), fmt.Sprintf("n%d", i); got != want {
		t.Fatalf("%s connected to %s, want %s", conn, got, want)
	}
	return b
}

// A service that received a request on one server of the cluster and is
// connected to another when it replies (its server went away in between)
// still has its reply delivered: nats-server keeps allow_responses per
// client connection on the server that delivered the request, so the
// replies to a service's callers are granted by subject (their inboxes).
// A service still may not publish into the inbox of a user that does not
// call it.
func TestReplyAfterTheReplierMovedToAnotherServer(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startAuthCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// quota on n0, admission on n2: each request crosses a route.
	quota := c.as(t, 0, bus.UserQuota, "quota")
	admission := c.as(t, 2, bus.UserAdmission, "admission")
	requests := make(chan *nats.Msg, 8)
	sub, err := quota.NC.QueueSubscribe(bus.QuotaReserve.Subject(), "quota", func(m *nats.Msg) { requests <- m })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := quota.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	type result struct {
		msg *nats.Msg
		err error
	}
	call := func() <-chan result {
		out := make(chan result, 1)
		go func() {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			defer rcancel()
			m, err := admission.NC.RequestWithContext(rctx, bus.QuotaReserve.Subject(), []byte("{}"))
			out <- result{m, err}
		}()
		return out
	}

	// Once on the same connection: the route carries the interest.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		done := call()
		select {
		case m := <-requests:
			assert.NoError(ct, m.Respond([]byte("before")))
		case r := <-done:
			assert.NoError(ct, r.err, "no request delivered")
			return
		}
		r := <-done
		if assert.NoError(ct, r.err) {
			assert.Equal(ct, "before", string(r.msg.Data))
		}
	}, 20*time.Second, 100*time.Millisecond)

	// The request is delivered on n0; n0 goes away; quota reconnects to
	// n1 and only then replies.
	done := call()
	var req *nats.Msg
	select {
	case req = <-requests:
	case r := <-done:
		t.Fatalf("request not delivered: %v", r.err)
	}
	reconnected := quota.Reconnected()
	c.servers[0].Shutdown()
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("quota did not reconnect")
	}
	if got := quota.NC.ConnectedServerName(); got == "n0" || got == "" {
		t.Fatalf("quota reconnected to %q, want another server", got)
	}
	if err := req.Respond([]byte("after")); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if assert.NoError(t, r.err, "the reply sent from %s", quota.NC.ConnectedServerName()) {
		assert.Equal(t, "after", string(r.msg.Data))
	}
	assert.Empty(t, c.seen.of("quota"), "permission violations reported to quota")

	// Still: quota answers admission, not the autoscaler, which does not
	// call it.
	as := c.as(t, 1, bus.UserAutoscaler, "autoscaler")
	inbox, err := as.NC.SubscribeSync(bus.InboxPrefix(bus.UserAutoscaler) + ".spoofed")
	if err != nil {
		t.Fatal(err)
	}
	if err := as.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := quota.NC.Publish(bus.InboxPrefix(bus.UserAutoscaler)+".spoofed", []byte("spoofed")); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { return len(c.seen.of("quota")) > 0 }, 5*time.Second, 10*time.Millisecond,
		"no permission violation reported for quota publishing into the autoscaler's inbox")
	if m, err := inbox.NextMsg(500 * time.Millisecond); err == nil {
		t.Errorf("the autoscaler's inbox received %q from quota", m.Data)
	}
}

// Each service may publish into the inboxes of the users that call what it
// serves, and into no other user's.
func TestRepliesGrantedIntoCallersInboxesOnly(t *testing.T) {
	want := map[string][]string{
		bus.UserAdmission:   {bus.UserAutoscaler, bus.UserGateway, bus.UserPropagator},
		bus.UserPropagator:  {bus.UserAdmin, bus.UserAdmission},
		bus.UserQuota:       {bus.UserAdmission, bus.UserGateway, bus.UserScheduler},
		bus.UserAggregator:  {bus.UserGateway},
		bus.UserRemediation: {bus.UserAdmin, bus.UserGateway},
	}
	for user, g := range bus.Grants() {
		t.Run(user, func(t *testing.T) {
			p := g.Permission(user)
			var got []string
			for _, u := range bus.Users() {
				if slices.ContainsFunc(p.Publish, func(s string) bool { return matches(s, bus.InboxPrefix(u)+".x") }) {
					got = append(got, u)
				}
			}
			assert.ElementsMatch(t, want[user], got, "users whose inboxes %s may publish into", user)
			if len(got) > 0 {
				assert.True(t, p.Responses, "%s answers discovery requests too", user)
			}
		})
	}
}
