package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/gateway"
	"atoll.dev/services/gateway/auth"
)

// eventsRegion is a NATS server with the region's users and the auth
// callout, and a gateway connected as its own user answering it.
func eventsRegion(t *testing.T) (*testGateway, *bus.Bus, *auth.Authenticator) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	dir := t.TempDir()
	na, err := bus.CreateAuth(filepath.Join(dir, "nats"))
	require.NoError(t, err)
	admin, err := bus.Open(ctx, bus.Config{StoreDir: filepath.Join(dir, "js"), Listen: true, Name: "admin", Auth: na, Logger: log})
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	gb, err := bus.Open(ctx, bus.Config{URL: admin.ClientURL(), Name: "gateway", NKeyFile: na.CredentialsFile(bus.UserGateway), SkipEnsure: true, Logger: log})
	require.NoError(t, err)
	t.Cleanup(gb.Close)
	a, err := auth.New(auth.Config{})
	require.NoError(t, err)
	cfg := gateway.Config{Listen: "127.0.0.1:0", Authenticator: a, EventsIssuerFile: na.EventsIssuerFile(), EventsNATSURL: admin.ClientURL()}
	gw, err := gateway.New(gb, log, &cfg)
	require.NoError(t, err)
	require.NoError(t, gw.Start(ctx))
	t.Cleanup(func() { _ = gw.Stop(context.Background()) })
	return &testGateway{Bus: gb, GW: gw, URL: gw.URL()}, admin, a
}

// violations collects a connection's permission violations.
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, err.Error())
}

func (v *violations) has(s string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range v.errs {
		if strings.Contains(e, s) {
			return true
		}
	}
	return false
}

// TestEventsCredentials: a project admin's credentials read the project's
// events, live and from its durable consumer, and nothing else; a
// developer may not make them; revoking them disconnects their
// connection within 5 s and refuses the next.
func TestEventsCredentials(t *testing.T) {
	g, admin, a := eventsRegion(t)
	alice, _ := a.Mint(auth.Identity{Subject: "alice", Roles: map[string]auth.Role{"web": auth.RoleAdmin}})
	bob, _ := a.Mint(auth.Identity{Subject: "bob", Roles: map[string]auth.Role{"web": auth.RoleDeveloper}})

	resp, body := g.do(t, "POST", "/v1/projects/web/events/credentials", bob, []byte(`{"name":"ci"}`))
	require.Equal(t, 403, resp.StatusCode, "a developer makes credentials: %s", body)
	resp, body = g.do(t, "POST", "/v1/projects/web/events/credentials", alice, []byte(`{"name":"Bad Name"}`))
	require.Equal(t, 400, resp.StatusCode, "a bad name: %s", body)
	resp, body = g.do(t, "POST", "/v1/projects/web/events/credentials", alice, []byte(`{"name":"ci"}`))
	require.Equal(t, 201, resp.StatusCode, "%s", body)
	var cred api.EventCredential
	require.NoError(t, json.Unmarshal(body, &cred))
	require.NotEmpty(t, cred.Password)
	resp, _ = g.do(t, "POST", "/v1/projects/web/events/credentials", alice, []byte(`{"name":"ci"}`))
	require.Equal(t, 409, resp.StatusCode, "the same name twice")
	resp, body = g.do(t, "GET", "/v1/projects/web/events/credentials", alice, nil)
	require.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, string(body), `"name":"ci"`)
	assert.NotContains(t, string(body), cred.Password, "a listing shows the secret")

	_, err := nats.Connect(cred.Servers, nats.UserInfo(cred.User, "wrong"), nats.MaxReconnects(0))
	require.Error(t, err, "a wrong password connects")

	var v violations
	closed := make(chan struct{})
	nc, err := nats.Connect(cred.Servers, nats.UserInfo(cred.User, cred.Password), nats.CustomInboxPrefix(cred.InboxPrefix),
		nats.ErrorHandler(v.handler), nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	require.NoError(t, err)
	defer nc.Close()

	mine, err := nc.SubscribeSync("atoll.evt.web.>")
	require.NoError(t, err)
	for _, subj := range []string{"atoll.evt.other.>", "atoll.>", "_INBOX.gateway.>", "$KV.>"} {
		_, err := nc.SubscribeSync(subj)
		require.NoError(t, err)
	}
	require.NoError(t, nc.Flush())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = admin.Publish(ctx, "atoll.evt.web.app.shop.running", "web-1", []byte(`{"event":"running"}`), nil)
	require.NoError(t, err)
	_, err = admin.Publish(ctx, "atoll.evt.other.app.x.running", "other-1", []byte(`{}`), nil)
	require.NoError(t, err)
	m, err := mine.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "atoll.evt.web.app.shop.running", m.Subject)
	for _, subj := range []string{"atoll.evt.other.>", "atoll.>", "_INBOX.gateway.>", "$KV.>"} {
		assert.Eventually(t, func() bool { return v.has(`Subscription to "` + subj + `"`) }, 5*time.Second, 10*time.Millisecond,
			"the server let the credentials subscribe to %s", subj)
	}
	// Its durable consumer: its project's events only, from where it
	// was, into its inbox.
	durable, err := nc.SubscribeSync(cred.Deliver)
	require.NoError(t, err)
	m, err = durable.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "atoll.evt.web.app.shop.running", m.Subject)
	require.NoError(t, durable.Unsubscribe())
	require.NoError(t, nc.Flush())
	// Missed while nobody subscribed, delivered when it does again.
	_, err = admin.Publish(ctx, "atoll.evt.web.app.shop.scaled", "web-2", []byte(`{"event":"scaled"}`), nil)
	require.NoError(t, err)
	durable, err = nc.SubscribeSync(cred.Deliver)
	require.NoError(t, err)
	m, err = durable.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "atoll.evt.web.app.shop.scaled", m.Subject)

	// It publishes nothing: not a pull whose reply subject is a platform
	// subject (JetStream would publish the event there on its behalf),
	// not an ack, not a consumer of its own, not the stream's info.
	for _, subj := range []string{"$JS.API.CONSUMER.MSG.NEXT.ATOLL_EVENTS." + cred.Consumer, "$JS.API.STREAM.INFO.ATOLL_EVENTS",
		"$JS.API.CONSUMER.CREATE.ATOLL_EVENTS.mine.atoll.evt.web.>", "atoll.evt.web.app.shop.running"} {
		require.NoError(t, nc.PublishRequest(subj, "atoll.audit.web.forged", []byte(`{"batch":1}`)))
		assert.Eventually(t, func() bool { return v.has(`Publish to "` + subj + `"`) }, 5*time.Second, 10*time.Millisecond,
			"the server let the credentials publish to %s", subj)
	}
	audit, err := admin.JS.Stream(ctx, bus.StreamAudit)
	require.NoError(t, err)
	ai, err := audit.Info(ctx)
	require.NoError(t, err)
	assert.Zero(t, ai.State.Msgs, "the credentials put something into the audit stream")

	start := time.Now()
	resp, body = g.do(t, "DELETE", "/v1/projects/web/events/credentials/ci", alice, nil)
	require.Equal(t, 204, resp.StatusCode, "%s", body)
	select {
	case <-closed:
		t.Logf("disconnected %s after the revoke", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("still connected 5 s after the revoke")
	}
	_, err = nats.Connect(cred.Servers, nats.UserInfo(cred.User, cred.Password), nats.MaxReconnects(0))
	require.Error(t, err, "revoked credentials connect")
	_, err = admin.JS.Consumer(context.Background(), bus.StreamEvents, cred.Consumer)
	assert.True(t, errors.Is(err, jetstream.ErrConsumerNotFound), "the consumer outlived its credentials: %v", err)
}
