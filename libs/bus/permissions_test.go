package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/bus"
)

// violations records the permission violations the server reports to
// each connection (the bus logs them as async errors).
type violations struct {
	mu     sync.Mutex
	byConn map[string][]string
}

func (v *violations) Enabled(context.Context, slog.Level) bool { return true }
func (v *violations) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "nats async error" {
		return nil
	}
	var conn, msg string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "connection":
			conn = a.Value.String()
		case "err":
			msg = a.Value.String()
		}
		return true
	})
	if strings.Contains(strings.ToLower(msg), "permissions violation") {
		v.mu.Lock()
		v.byConn[conn] = append(v.byConn[conn], msg)
		v.mu.Unlock()
	}
	return nil
}
func (v *violations) WithAttrs([]slog.Attr) slog.Handler { return v }
func (v *violations) WithGroup(string) slog.Handler      { return v }

func (v *violations) of(conn string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.byConn[conn])
}

// authRegion is a nats-server started from the generated configuration
// text, with the topology bootstrapped by the admin.
type authRegion struct {
	url   string
	auth  *bus.Auth
	admin *bus.Bus
	seen  *violations
}

func startAuthRegion(t *testing.T) *authRegion {
	t.Helper()
	dir := t.TempDir()
	auth, err := bus.CreateAuth(filepath.Join(dir, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	text := fmt.Sprintf("host: 127.0.0.1\nport: -1\njetstream { store_dir: %q }\n", filepath.Join(dir, "js")) + auth.ServerConfig()
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("generated configuration does not parse: %v\n%s", err, text)
	}
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	r := &authRegion{url: srv.ClientURL(), auth: auth, seen: &violations{byConn: map[string][]string{}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Bootstrap(ctx, bus.Config{URL: r.url, NKeyFile: auth.CredentialsFile(bus.UserAdmin), Name: "bootstrap"}); err != nil {
		t.Fatal(err)
	}
	r.admin, err = bus.Open(ctx, bus.Config{URL: r.url, NKeyFile: auth.CredentialsFile(bus.UserAdmin), Name: "admin",
		SkipEnsure: true, Logger: slog.New(r.seen)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.admin.Close)
	return r
}

// as connects as user, under a connection name of its own.
func (r *authRegion) as(t *testing.T, user, conn string) *bus.Bus {
	t.Helper()
	c, err := r.admin.ConnectAs(conn, r.auth.CredentialsFile(user))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(c.Close)
	if c.User() != user {
		t.Fatalf("connected as %q, want %q", c.User(), user)
	}
	return c
}

// refused checks that op fails and that the server reports a permission
// violation to conn.
func (r *authRegion) refused(t *testing.T, conn string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 750*time.Millisecond)
	defer cancel()
	if err := op(ctx); err == nil {
		t.Fatal("allowed, want refused")
	}
	require.Eventually(t, func() bool { return len(r.seen.of(conn)) > 0 }, 5*time.Second, 10*time.Millisecond, "no permission violation reported")
}

// concrete turns a subject pattern into a subject it matches.
func concrete(pattern string) string {
	toks := strings.Split(pattern, ".")
	for i, tok := range toks {
		switch tok {
		case "*":
			toks[i] = fmt.Sprintf("t%d", i)
		case ">":
			toks[i] = "rest"
		}
	}
	return strings.Join(toks, ".")
}

// matches reports whether subject matches pattern.
func matches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}

func kvPut(b *bus.Bus, bucket, key string) func(context.Context) error {
	return func(ctx context.Context) error {
		kv, err := b.KV(ctx, bucket)
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, key, []byte("v"))
		return err
	}
}

func kvGet(b *bus.Bus, bucket, key string) func(context.Context) error {
	return func(ctx context.Context) error {
		kv, err := b.KV(ctx, bucket)
		if err != nil {
			return err
		}
		_, err = kv.Get(ctx, key)
		return err
	}
}

func request(b *bus.Bus, subject string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := b.NC.RequestWithContext(ctx, subject, []byte("{}"))
		return err
	}
}

func subscribe(b *bus.Bus, subject string) func(context.Context) error {
	return func(ctx context.Context) error {
		sub, err := b.NC.SubscribeSync(subject)
		if err != nil {
			return err
		}
		_, err = sub.NextMsgWithContext(ctx)
		return err
	}
}

// serve answers every request on subject with "ok" until the test ends.
func serve(t *testing.T, b *bus.Bus, name, subject string, h micro.HandlerFunc) {
	t.Helper()
	if h == nil {
		h = func(r micro.Request) { _ = r.Respond([]byte("ok")) }
	}
	svc, err := micro.AddService(b.NC, micro.Config{Name: name, Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	if err := svc.AddEndpoint("e", h, micro.WithEndpointSubject(subject)); err != nil {
		t.Fatal(err)
	}
	if err := b.NC.Flush(); err != nil {
		t.Fatal(err)
	}
}

// The refusals the issue names, and the traffic between services that
// must pass.
func TestPermissionsRefuse(t *testing.T) {
	r := startAuthRegion(t)
	// Endpoints served by their own users, so that a refused call is
	// refused by the permissions, not for want of a responder.
	for _, svc := range []struct {
		user string
		eps  []bus.Descriptor
	}{
		{bus.UserAdmission, []bus.Descriptor{bus.AdmissionSubmit}},
		{bus.UserQuota, []bus.Descriptor{bus.QuotaSet, bus.QuotaReserve}},
	} {
		b := r.as(t, svc.user, svc.user+"-endpoint")
		for _, ep := range svc.eps {
			serve(t, b, svc.user, ep.Subject(), nil)
		}
	}
	serve(t, r.as(t, bus.UserAggregator, "aggregator-endpoint"), "debug", bus.DebugSubject("exec", "*", "*", "*"), nil)

	type refusal struct {
		name string
		user string
		op   func(b *bus.Bus) func(context.Context) error
	}
	tests := []refusal{
		{"gateway writes workloads", bus.UserGateway, func(b *bus.Bus) func(context.Context) error {
			return kvPut(b, bus.BucketWorkloads, "p.app.web")
		}},
		{"scheduler writes quota", bus.UserScheduler, func(b *bus.Bus) func(context.Context) error {
			return kvPut(b, bus.BucketQuota, "p")
		}},
		{"scheduler submits to admission", bus.UserScheduler, func(b *bus.Bus) func(context.Context) error {
			return request(b, bus.AdmissionSubmit.Subject())
		}},
		{"admission sets quota", bus.UserAdmission, func(b *bus.Bus) func(context.Context) error {
			return request(b, bus.QuotaSet.Subject())
		}},
		// The scheduler reserves and releases a requeued TrainingJob's
		// quota, but never sets limits.
		{"scheduler sets quota", bus.UserScheduler, func(b *bus.Bus) func(context.Context) error {
			return request(b, bus.QuotaSet.Subject())
		}},
		{"scheduler takes a propagator lease", bus.UserScheduler, func(b *bus.Bus) func(context.Context) error {
			return kvPut(b, bus.BucketLeases, "propagator.zone-a")
		}},
		{"propagator takes the scheduler lease", bus.UserPropagator, func(b *bus.Bus) func(context.Context) error {
			return kvPut(b, bus.BucketLeases, "scheduler")
		}},
		{"gateway snoops on stdin", bus.UserGateway, func(b *bus.Bus) func(context.Context) error {
			return subscribe(b, bus.DebugSessionSubject("*", "up"))
		}},
		{"scheduler reads the gateway's replies", bus.UserScheduler, func(b *bus.Bus) func(context.Context) error {
			return subscribe(b, bus.InboxPrefix(bus.UserGateway)+".>")
		}},
		{"quota reads idempotency records", bus.UserQuota, func(b *bus.Bus) func(context.Context) error {
			return kvGet(b, bus.BucketIdempotency, "k")
		}},
		{"admission writes audit records", bus.UserAdmission, func(b *bus.Bus) func(context.Context) error {
			return func(ctx context.Context) error {
				_, err := b.Publish(ctx, bus.AuditSubject("p", "create"), "id", []byte("{}"), nil)
				return err
			}
		}},
		{"admission purges workloads", bus.UserAdmission, func(b *bus.Bus) func(context.Context) error {
			return func(ctx context.Context) error {
				s, err := b.Stream(ctx, "KV_"+bus.BucketWorkloads)
				if err != nil {
					return err
				}
				return s.Purge(ctx)
			}
		}},
		{"aggregator creates a stream", bus.UserAggregator, func(b *bus.Bus) func(context.Context) error {
			return func(ctx context.Context) error {
				_, err := b.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "X", Subjects: []string{"x.>"}})
				return err
			}
		}},
	}
	// Any user but the gateway's opens an exec session.
	for _, u := range bus.Users()[1:] {
		if u == bus.UserGateway {
			continue
		}
		tests = append(tests, refusal{u + " opens an exec session", u, func(b *bus.Bus) func(context.Context) error {
			return request(b, bus.DebugSubject("exec", "p", "app", "web"))
		}})
	}
	t.Run("group", func(t *testing.T) {
		for i, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				conn := fmt.Sprintf("refused-%d", i)
				r.refused(t, conn, tc.op(r.as(t, tc.user, conn)))
			})
		}
	})

	t.Run("a client without a user cannot connect", func(t *testing.T) {
		// Refused once the auth callout (nobody here) does not answer.
		nc, err := nats.Connect(r.url, nats.MaxReconnects(0), nats.Timeout(10*time.Second))
		if err == nil {
			nc.Close()
			t.Fatal("connected without credentials")
		}
		if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Fatalf("got %v, want an authorization violation", err)
		}
	})
	t.Run("a client with an unknown key cannot connect", func(t *testing.T) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		nc, err := nats.Connect(r.url, nats.MaxReconnects(0), nats.Nkey(pub, kp.Sign))
		if err == nil {
			nc.Close()
			t.Fatal("connected with a key the server does not know")
		}
	})
	t.Run("the gateway calls admission and opens exec sessions", func(t *testing.T) {
		gw := r.as(t, bus.UserGateway, "gateway-caller")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, subj := range []string{bus.AdmissionSubmit.Subject(), bus.DebugSubject("exec", "p", "app", "web"), bus.QuotaSet.Subject()} {
			m, err := gw.NC.RequestWithContext(ctx, subj, []byte("{}"))
			if err != nil || string(m.Data) != "ok" {
				t.Errorf("request %s: %v", subj, err)
			}
		}
		if v := r.seen.of("gateway-caller"); len(v) > 0 {
			t.Errorf("violations: %v", v)
		}
	})
}

// Every grant allows what it says, and each user is refused the buckets
// it is not granted: derived from bus.Grants, so a grant added there is
// checked here.
func TestEveryGrantWorks(t *testing.T) {
	r := startAuthRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	grants := bus.Grants()
	topo := bus.DefaultTopology(1)

	// Something to read in every bucket and stream.
	for _, k := range topo.Buckets {
		if err := kvPut(r.admin, k.Bucket, "seed")(ctx); err != nil {
			t.Fatal(err)
		}
	}
	seedEvent := bus.EventSubject("p", "App", "seed", "admitted")
	if _, err := r.admin.Publish(ctx, seedEvent, "seed", []byte("{}"), nil); err != nil {
		t.Fatal(err)
	}
	// And in the signals stream, which the remediation service follows.
	seedSignal := bus.NodeSubject("c", "seed", "seed")
	if _, err := r.admin.Publish(ctx, seedSignal, "seed-signal", []byte("{}"), nil); err != nil {
		t.Fatal(err)
	}
	seedOf := map[string]string{bus.StreamSignals: seedSignal}

	conns := map[string]*bus.Bus{}
	for _, u := range bus.Users()[1:] {
		conns[u] = r.as(t, u, "grant-"+u)
	}
	keyFor := func(pattern string) string { return strings.TrimPrefix(concrete("k."+pattern), "k.") }

	for _, u := range bus.Users()[1:] {
		g, b := grants[u], conns[u]
		t.Run(u, func(t *testing.T) {
			for _, w := range g.Writes {
				for _, k := range w.Keys {
					key := keyFor(k)
					if err := kvPut(b, w.Bucket, key)(ctx); err != nil {
						t.Errorf("write %s %s: %v", w.Bucket, key, err)
					}
					if _, err := bus.Update(ctx, mustKV(t, b, w.Bucket), key, func([]byte, bool) ([]byte, error) { return []byte("w"), nil }); err != nil {
						t.Errorf("update %s %s: %v", w.Bucket, key, err)
					}
				}
			}
			readable := slices.Clone(g.Reads)
			for _, w := range g.Writes {
				readable = append(readable, w.Bucket)
			}
			for _, bucket := range readable {
				if err := kvGet(b, bucket, "seed")(ctx); err != nil {
					t.Errorf("get %s: %v", bucket, err)
				}
				if _, err := b.LastEntry(ctx, bucket, "seed"); err != nil {
					t.Errorf("last entry %s: %v", bucket, err)
				}
				mctx, mcancel := context.WithCancel(ctx)
				m, err := b.MirrorFiltered(mctx, bucket, "seed", nil)
				if err != nil {
					t.Errorf("mirror %s: %v", bucket, err)
				} else {
					select {
					case <-m.Ready():
						if _, ok := m.Get("seed"); !ok {
							t.Errorf("mirror %s lacks the seed", bucket)
						}
					case <-time.After(5 * time.Second):
						t.Errorf("mirror %s not ready", bucket)
					}
				}
				mcancel()
			}
			for _, s := range g.Follows {
				st, err := b.Stream(ctx, s)
				if err != nil {
					t.Errorf("stream %s: %v", s, err)
					continue
				}
				seed := seedEvent
				if v, ok := seedOf[s]; ok {
					seed = v
				}
				if _, err := st.GetLastMsgForSubject(ctx, seed); err != nil {
					t.Errorf("last message of %s: %v", s, err)
				}
				oc, err := b.JS.OrderedConsumer(ctx, s, jetstream.OrderedConsumerConfig{FilterSubjects: []string{seed}})
				if err != nil {
					t.Errorf("ordered consumer on %s: %v", s, err)
					continue
				}
				if _, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
					t.Errorf("next from %s: %v", s, err)
				}
			}
			for _, e := range g.Emits {
				if _, err := b.Publish(ctx, concrete(e), u+"-"+e, []byte("{}"), nil); err != nil {
					t.Errorf("emit %s: %v", e, err)
				}
			}
			// The buckets it neither reads nor writes are out of bounds.
			for _, k := range topo.Buckets {
				if slices.Contains(readable, k.Bucket) {
					continue
				}
				rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				if err := kvGet(b, k.Bucket, "seed")(rctx); err == nil {
					t.Errorf("read %s allowed", k.Bucket)
				}
				rcancel()
			}
		})
	}

	// Each call reaches a server, each plain send a receiver.
	t.Run("calls", func(t *testing.T) {
		for _, server := range bus.Users()[1:] {
			for i, subj := range grants[server].Serves {
				serve(t, conns[server], fmt.Sprintf("%s-%d", server, i), subj, nil)
			}
		}
		for _, caller := range bus.Users()[1:] {
			for _, call := range grants[caller].Calls {
				servers := 0
				for _, s := range bus.Users()[1:] {
					servers += len(slices.DeleteFunc(slices.Clone(grants[s].Serves), func(p string) bool { return !matches(p, concrete(call)) }))
				}
				if servers == 0 {
					t.Errorf("%s calls %s, which no service serves", caller, call)
					continue
				}
				m, err := conns[caller].NC.RequestWithContext(ctx, concrete(call), []byte("{}"))
				if err != nil || string(m.Data) != "ok" {
					t.Errorf("%s calls %s: %v", caller, concrete(call), err)
				}
			}
		}
		for _, sender := range bus.Users()[1:] {
			for _, send := range grants[sender].Sends {
				var subs []*nats.Subscription
				for _, rcv := range bus.Users()[1:] {
					for _, p := range grants[rcv].Receives {
						if matches(p, concrete(send)) {
							sub, err := conns[rcv].NC.SubscribeSync(p)
							if err != nil {
								t.Fatal(err)
							}
							_ = conns[rcv].NC.Flush()
							subs = append(subs, sub)
						}
					}
				}
				if len(subs) == 0 {
					t.Errorf("%s sends %s, which nobody receives", sender, send)
				}
				if err := conns[sender].NC.Publish(concrete(send), []byte("frame")); err != nil {
					t.Fatal(err)
				}
				for _, sub := range subs {
					if _, err := sub.NextMsg(5 * time.Second); err != nil {
						t.Errorf("%s sends %s: %v", sender, send, err)
					}
					_ = sub.Unsubscribe()
				}
			}
		}
		// The admin discovers micro services ($SRV), which the services answer.
		m, err := r.admin.NC.RequestWithContext(ctx, "$SRV.PING.admission-0", nil)
		if err != nil {
			t.Fatalf("ping: %v", err)
		}
		if !strings.Contains(string(m.Data), "admission-0") {
			t.Errorf("ping answered %s", m.Data)
		}
	})

	// Allowed traffic caused no violation; the refused reads above did.
	t.Run("violations are the refused reads only", func(t *testing.T) {
		for _, u := range bus.Users()[1:] {
			for _, v := range r.seen.of("grant-" + u) {
				if !strings.Contains(v, "STREAM.INFO.KV_") {
					t.Errorf("%s: unexpected violation %s", u, v)
				}
			}
		}
	})
}

func mustKV(t *testing.T, b *bus.Bus, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := b.KV(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// The generated configuration text and the embedded server's users are
// the same users with the same permissions.
func TestServerConfigMatchesServerUsers(t *testing.T) {
	dir := t.TempDir()
	auth, err := bus.CreateAuth(dir)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := auth.WriteServerConfig(conf); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	perms := func(users []*server.NkeyUser) map[string]*server.Permissions {
		out := map[string]*server.Permissions{}
		for _, u := range users {
			out[u.Nkey] = u.Permissions
		}
		return out
	}
	if diff := cmp.Diff(perms(auth.ServerUsers()), perms(opts.Nkeys)); diff != "" {
		t.Errorf("(-embedded +configuration):\n%s", diff)
	}
	if len(opts.Nkeys) != len(bus.Users()) {
		t.Errorf("%d users, want %d", len(opts.Nkeys), len(bus.Users()))
	}
	// The seeds are private; the configuration holds public keys only.
	for _, u := range bus.Users() {
		fi, err := os.Stat(auth.CredentialsFile(u))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", u, fi.Mode().Perm())
		}
	}
	text, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range bus.Users() {
		b, err := os.ReadFile(auth.CredentialsFile(u))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if seed := lines[len(lines)-1]; !strings.HasPrefix(seed, "SU") || strings.Contains(string(text), seed) {
			t.Errorf("%s: seed %.4s... missing from its file or present in the configuration", u, seed)
		}
	}
	// Loading again keeps the keys.
	again, err := bus.CreateAuth(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range bus.Users() {
		if again.PublicKey(u) != auth.PublicKey(u) || auth.PublicKey(u) == "" {
			t.Errorf("%s: key changed or empty on reload", u)
		}
	}
}

// JetStream publishes to a consumer's deliver subject and to a direct
// get's reply subject on the requester's behalf, unchecked against its
// permissions: a service can have messages it wrote in its own bucket,
// identity headers included, delivered to an endpoint it may not publish
// to. OnlyFrom refuses them.
func TestOnlyFromRefusesWhatJetStreamDeliversForAnotherUser(t *testing.T) {
	r := startAuthRegion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := r.as(t, bus.UserAdmission, "admission")
	subject := bus.AdmissionSubmit.Subject()
	var mu sync.Mutex
	arrived, handled := map[string]int{}, map[string]int{}
	inner := adm.OnlyFrom(func(req micro.Request) {
		mu.Lock()
		handled[req.Headers().Get(bus.HeaderPrincipal)]++
		mu.Unlock()
		_ = req.Respond([]byte("ok"))
	}, bus.UserGateway)
	serve(t, adm, "admission", subject, func(req micro.Request) {
		mu.Lock()
		arrived[req.Headers().Get(bus.HeaderPrincipal)]++
		mu.Unlock()
		inner(req)
	})

	// The scheduler writes a forged submission into its own bucket...
	sch := r.as(t, bus.UserScheduler, "scheduler")
	forged := nats.NewMsg("$KV." + bus.BucketPlacements + ".forged")
	forged.Header.Set(bus.HeaderPrincipal, "forger")
	forged.Header.Set(bus.HeaderPlatformAdmin, "true")
	forged.Data = []byte(`{"kind":"App"}`)
	if _, err := sch.JS.PublishMsg(ctx, forged); err != nil {
		t.Fatal(err)
	}
	// ...and has JetStream deliver it to admission: by a push consumer
	// (in micro's queue group)...
	create := fmt.Sprintf(`{"stream_name":"KV_%[1]s","config":{"name":"forger","deliver_subject":%[2]q,"deliver_group":"q","filter_subject":"$KV.%[1]s.forged","ack_policy":"none"}}`,
		bus.BucketPlacements, subject)
	resp, err := sch.NC.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.KV_"+bus.BucketPlacements+".forger", []byte(create))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(resp.Data), `"error"`) {
		t.Fatalf("create the consumer: %s", resp.Data)
	}
	// ...and as the reply to a direct get.
	if err := sch.NC.PublishRequest("$JS.API.DIRECT.GET.KV_"+bus.BucketPlacements+".$KV."+bus.BucketPlacements+".forged", subject, nil); err != nil {
		t.Fatal(err)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		mu.Lock()
		defer mu.Unlock()
		assert.GreaterOrEqual(c, arrived["forger"], 2, "forged requests arrived (JetStream no longer delivers them?)")
	}, 10*time.Second, 10*time.Millisecond)

	// The gateway's own request is answered.
	gw := r.as(t, bus.UserGateway, "gateway")
	h := nats.Header{}
	h.Set(bus.HeaderPrincipal, "alice")
	m, err := gw.NC.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Header: h, Data: []byte("{}")})
	if err != nil || string(m.Data) != "ok" {
		t.Fatalf("gateway request: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(map[string]int{"alice": 1}, handled); diff != "" {
		t.Errorf("handled (-want +got):\n%s", diff)
	}
}

// A service opened with SkipEnsure waits for the bootstrap instead of
// creating the topology, which its user may not do.
func TestSkipEnsureWaitsForTheBootstrap(t *testing.T) {
	dir := t.TempDir()
	auth, err := bus.CreateAuth(filepath.Join(dir, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	// An embedded server with the users; its own connection, the admin's,
	// does not ensure either.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ectx, ecancel := context.WithTimeout(ctx, time.Second)
	defer ecancel()
	srv, err := bus.Open(ectx, bus.Config{StoreDir: filepath.Join(dir, "js"), Listen: true, Auth: auth, SkipEnsure: true, Name: "embedded",
		Logger: slog.New(&countingHandler{n: map[string]int{}})})
	if err == nil {
		srv.Close()
		t.Fatal("opened with SkipEnsure before any bootstrap")
	}
	srv2, err := bus.StartServer(bus.ServerOptions{StoreDir: filepath.Join(dir, "js"), Listen: true, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv2.Shutdown(); srv2.WaitForShutdown() })
	url := srv2.ClientURL()

	// The scheduler cannot create the topology.
	short, scancel := context.WithTimeout(ctx, 2*time.Second)
	defer scancel()
	if b, err := bus.Open(short, bus.Config{URL: url, NKeyFile: auth.CredentialsFile(bus.UserScheduler), Name: "ensure",
		Logger: slog.New(&countingHandler{n: map[string]int{}})}); err == nil {
		b.Close()
		t.Fatal("the scheduler's user created the topology")
	}

	logs := &countingHandler{n: map[string]int{}}
	opened := make(chan error, 1)
	var sched *bus.Bus
	go func() {
		var err error
		sched, err = bus.Open(ctx, bus.Config{URL: url, NKeyFile: auth.CredentialsFile(bus.UserScheduler), Name: "scheduler",
			SkipEnsure: true, Logger: slog.New(logs)})
		opened <- err
	}()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, logs.count("bus topology not bootstrapped yet, waiting"), 2, "waits logged")
	}, 10*time.Second, 10*time.Millisecond)
	select {
	case err := <-opened:
		t.Fatalf("open returned before the bootstrap: %v", err)
	default:
	}
	if err := bus.Bootstrap(ctx, bus.Config{URL: url, NKeyFile: auth.CredentialsFile(bus.UserAdmin), Name: "bootstrap"}); err != nil {
		t.Fatal(err)
	}
	if err := <-opened; err != nil {
		t.Fatal(err)
	}
	defer sched.Close()
	if err := kvPut(sched, bus.BucketPlacements, "p.app.web")(ctx); err != nil {
		t.Errorf("the scheduler writes placements after the bootstrap: %v", err)
	}
}

// Without users (permissions off) OnlyFrom passes every request.
func TestOnlyFromWithoutUsers(t *testing.T) {
	b := openBus(t)
	subject := bus.AdmissionSubmit.Subject()
	serve(t, b, "admission", subject, b.OnlyFrom(func(r micro.Request) { _ = r.Respond([]byte("ok")) }, bus.UserGateway))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := b.NC.RequestWithContext(ctx, subject, nil)
	if err != nil || string(m.Data) != "ok" {
		t.Fatalf("request: %v", err)
	}
}

// TestBucketDeliveriesAreNotTrackedAsReplies: a user may "ack" what its
// bucket watches deliver (their ordered consumers take no acks), so
// nats-server does not track each delivery's $JS.ACK reply subject for a
// user that answers requests (it would scan them all every second); a
// followed stream's deliveries get no such grant, so no service acks
// another's durable consumer.
func TestBucketDeliveriesAreNotTrackedAsReplies(t *testing.T) {
	for user, g := range bus.Grants() {
		p := g.Permission(user)
		for _, b := range g.Reads {
			assert.Contains(t, p.Publish, "$JS.ACK.KV_"+b+".>", "%s reads %s", user, b)
		}
		for _, s := range g.Follows {
			for _, subj := range p.Publish {
				assert.False(t, strings.HasPrefix(subj, "$JS.ACK."+s+"."), "%s may ack %s's consumers: %s", user, s, subj)
			}
		}
	}
}
