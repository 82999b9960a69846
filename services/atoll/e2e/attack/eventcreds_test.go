package attack

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/sdk"
	"atoll.dev/services/atoll/e2e"
)

// The events credentials attacks: a project's subscriber, with the NATS
// credentials its admins issued, tries to read another project's events
// or the platform's subjects, to publish anything (a forged event, a pull
// or an API request whose reply subject is a platform subject, which
// JetStream would publish to on its behalf), to pass as the gateway's
// system connection, and people without the admin role try to issue,
// list or revoke a project's credentials.

// eventsURL is a TCP URL of the region's NATS for the events
// credentials' connections, as a subscriber outside the region has: the
// server's own when it listens, else a loopback proxy to its in-process
// connections. Over the bare in-process pipe, which buffers nothing, a
// refused client's PING and the server's -ERR wait for each other until
// the server's write deadline (10 s), and the client sees a closed pipe
// instead of the refusal.
func eventsURL(t *testing.T) string {
	t.Helper()
	srv := reg.Bus.Server()
	if srv == nil || srv.Addr() != nil {
		return reg.Bus.ClientURL()
	}
	l, err := net.Listen("tcp", "127.0.0.1:0") //nolint:noctx // a listen on loopback port 0 does not block
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go proxyInProcess(c, srv)
		}
	}()
	return "nats://" + l.Addr().String()
}

// proxyInProcess copies between c and a new in-process connection to srv
// until either side closes, then closes both.
func proxyInProcess(c net.Conn, srv *server.Server) {
	defer c.Close()
	s, err := srv.InProcessConn()
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
}

// refusal reports whether a connect's error is the server refusing it:
// its authorization violation, or the connection closed before that
// error reached the client (the server closes a refused connection right
// after writing it). A connect that succeeds, or fails otherwise (a
// timeout), is no refusal.
func refusal(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, io.EOF)
}

// eventsConn connects to url (eventsURL) with an events credential,
// collecting the server's permission violations.
func eventsConn(t *testing.T, url, user, pass, inbox string) (*nats.Conn, func(string) bool, error) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	opts := []nats.Option{nats.UserInfo(user, pass), nats.Name("attack-events"), nats.MaxReconnects(0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, err.Error())
		})}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(nc.Close)
	refused := func(subject string) bool {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			for _, v := range seen {
				if strings.Contains(v, `"`+subject+`"`) {
					mu.Unlock()
					return true
				}
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	return nc, refused, nil
}

func TestEventsCredentialsStayInTheirProject(t *testing.T) {
	e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := func(tok string) *sdk.Client {
		c, err := sdk.New(reg.GatewayURL, sdk.WithToken(tok), sdk.WithHTTPClient(httpc))
		require.NoError(t, err)
		return c
	}
	url := eventsURL(t)
	admin := client(reg.Token("alice", false, map[string]string{"evatk": "admin"}))
	dev := client(reg.Token("mallory", false, map[string]string{"evatk": "developer", "evother": "admin"}))

	t.Run("only the project's admins manage its credentials", func(t *testing.T) {
		_, err := dev.CreateEventCredentials(ctx, "evatk", api.EventCredentialRequest{Name: "x"})
		assert.True(t, sdk.IsForbidden(err), "a developer issued credentials: %v", err)
		_, err = dev.EventCredentials(ctx, "evatk")
		assert.True(t, sdk.IsForbidden(err), "a developer listed credentials: %v", err)
		assert.Error(t, dev.RevokeEventCredentials(ctx, "evatk", "x"), "a developer revoked credentials")
		_, err = dev.CreateEventCredentials(ctx, "evatk", api.EventCredentialRequest{Name: "a.b"})
		assert.Error(t, err, "a name that is not a token")
	})

	cred, err := admin.CreateEventCredentials(ctx, "evatk", api.EventCredentialRequest{Name: "sub"})
	require.NoError(t, err)
	otherCred, err := dev.CreateEventCredentials(ctx, "evother", api.EventCredentialRequest{Name: "sub"})
	require.NoError(t, err)

	t.Run("wrong secrets and made-up users are refused", func(t *testing.T) {
		for _, c := range []struct{ user, pass string }{
			{cred.User, otherCred.Password},             // another credential's secret
			{cred.User, ""},                             // none
			{"evother_sub", cred.Password},              // another project's user, this secret
			{bus.EventsSystemUser, cred.Password},       // the gateway's system connection
			{bus.UserAdmin, "admin"},                    // a service user's name
			{"evatk_sub_x", cred.Password},              // a user that parses oddly
			{strings.ToUpper(cred.User), cred.Password}, // not the same user
		} {
			_, _, err := eventsConn(t, url, c.user, c.pass, "")
			assert.True(t, refusal(err), "connected as %q: %v", c.user, err)
		}
	})

	nc, refused, err := eventsConn(t, url, cred.User, cred.Password, cred.InboxPrefix)
	require.NoError(t, err)
	t.Run("subscribing outside the project's events and its inboxes", func(t *testing.T) {
		for _, subj := range []string{"atoll.evt.evother.>", "atoll.evt.*.app.>", "atoll.>", ">", "_INBOX.>", "_INBOX.gateway.>",
			otherCred.InboxPrefix + ".>", otherCred.Deliver, "$KV.>", "$JS.>", "$SYS.>", "atoll.audit.>", "atoll.req.>"} {
			_, err := nc.SubscribeSync(subj)
			require.NoError(t, err)
			assert.True(t, refused(subj), "subscribed to %s", subj)
		}
	})
	t.Run("publishing anything", func(t *testing.T) {
		audit, err := reg.Bus.JS.Stream(ctx, bus.StreamAudit)
		require.NoError(t, err)
		before, err := audit.Info(ctx)
		require.NoError(t, err)
		for _, subj := range []string{"atoll.evt.evatk.app.x.running", "$JS.API.CONSUMER.MSG.NEXT.ATOLL_EVENTS." + cred.Consumer,
			"$JS.API.CONSUMER.INFO.ATOLL_EVENTS." + cred.Consumer, "$JS.ACK.ATOLL_EVENTS." + cred.Consumer + ".1.1.1.1.1",
			"$JS.API.STREAM.INFO.ATOLL_EVENTS", "$SYS.REQ.SERVER.PING", bus.AuthCalloutSubject} {
			require.NoError(t, nc.PublishRequest(subj, "atoll.audit.evatk.forged", []byte(`{"batch":1}`)))
			assert.True(t, refused(subj), "published to %s", subj)
		}
		after, err := audit.Info(ctx)
		require.NoError(t, err)
		forged, err := audit.Info(ctx, jetstreamSubjects("atoll.audit.evatk.forged"))
		require.NoError(t, err)
		assert.Zero(t, forged.State.Subjects["atoll.audit.evatk.forged"], "something reached the audit stream on the attacker's reply subject (%d → %d)", before.State.Msgs, after.State.Msgs)
	})
	t.Run("revoked, it is out", func(t *testing.T) {
		closed := make(chan struct{})
		nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
		require.NoError(t, admin.RevokeEventCredentials(ctx, "evatk", "sub"))
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("still connected 5 s after the revoke")
		}
		_, _, err := eventsConn(t, url, cred.User, cred.Password, cred.InboxPrefix)
		assert.True(t, refusal(err), "revoked credentials connect: %v", err)
		assert.Error(t, dev.RevokeEventCredentials(ctx, "evatk", "sub"), "revoked twice")
	})
}

// jetstreamSubjects asks a stream's info for the message count on subject.
func jetstreamSubjects(subject string) jetstream.StreamInfoOpt {
	return jetstream.WithSubjectFilter(subject)
}
