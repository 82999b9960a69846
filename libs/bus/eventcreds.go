package bus

// Events credentials: NATS users outside the platform, one per credential
// a project admin issues (`atoll events credentials`), that may read only
// their project's events.
//
// They are not in the server's configuration. nats-server hands every
// connection it does not know to the auth callout (AuthCallout,
// `authorization { auth_callout {...} }`), which the gateway answers
// (services/gateway eventcreds.go): it checks the credential in
// BucketEventCreds and answers with a user JWT, signed by the region's
// events issuer (an account nkey whose seed only the gateway holds),
// carrying EventsPermission. Revoking a credential deletes it there and
// kicks its connections through the system account, which the gateway
// reaches with a connection the callout itself places there
// (EventsSystemUser).

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// EventsSystemUser is the user name of the gateway's own connection to
// the system account (to kick the connections of a revoked credential):
// the callout places it there when its password is EventsSystemPassword.
const EventsSystemUser = "atoll-events-system"

// eventsIssuerFile is the events issuer's seed file in the credentials
// directory.
const eventsIssuerFile = "events-issuer.nk"

// GlobalAccount is the account every Atoll user is in (configuration mode,
// no accounts: nats-server's global account).
const GlobalAccount = server.DEFAULT_GLOBAL_ACCOUNT

// SystemAccount is nats-server's system account.
const SystemAccount = server.DEFAULT_SYSTEM_ACCOUNT

// EventsIssuerFile is the path of the events issuer's seed: an account
// nkey that signs the callout's answers (the gateway's alone).
func (a *Auth) EventsIssuerFile() string { return a.dir + string(os.PathSeparator) + eventsIssuerFile }

// EventsIssuer is the events issuer's public key ("" when the directory
// has none: the server then has no auth callout).
func (a *Auth) EventsIssuer() string { return a.issuer }

// loadIssuer reads (and with create, first makes) the events issuer's seed.
func (a *Auth) loadIssuer(create bool) error {
	path := a.EventsIssuerFile()
	if create {
		kp, err := nkeys.CreateAccount()
		if err != nil {
			return fmt.Errorf("events issuer: %w", err)
		}
		seed, err := kp.Seed()
		if err != nil {
			return fmt.Errorf("events issuer: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // G304: the credentials directory the operator named
		switch {
		case errors.Is(err, fs.ErrExist):
		case err != nil:
			return fmt.Errorf("events issuer: %w", err)
		default:
			_, werr := fmt.Fprintf(f, "%s\n", seed)
			if err := errors.Join(werr, f.Close()); err != nil {
				_ = os.Remove(path)
				return fmt.Errorf("events issuer %s: %w", path, err)
			}
		}
	}
	kp, err := LoadEventsIssuer(path)
	if errors.Is(err, fs.ErrNotExist) && !create {
		return nil // an older directory: no callout
	}
	if err != nil {
		return err
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("events issuer %s: %w", path, err)
	}
	a.issuer = pub
	return nil
}

// LoadEventsIssuer reads the events issuer's key pair from its seed file.
func LoadEventsIssuer(path string) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the seed file the operator named
	if err != nil {
		return nil, fmt.Errorf("events issuer: %w", err)
	}
	defer clear(b)
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("events issuer %s: %w", path, err)
	}
	if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicAccountKey(pub) {
		return nil, fmt.Errorf("events issuer %s: not an account nkey seed", path)
	}
	return kp, nil
}

// ServerAuthCallout is the embedded server's auth callout: connections of
// users it does not know go to the gateway, which answers as the issuer.
// Every service user bypasses it. Nil without an issuer.
func (a *Auth) ServerAuthCallout() *server.AuthCallout {
	if a.issuer == "" {
		return nil
	}
	c := &server.AuthCallout{Issuer: a.issuer, Account: GlobalAccount}
	for _, u := range Users() {
		c.AuthUsers = append(c.AuthUsers, a.keys[u])
	}
	return c
}

// serverCalloutConfig is ServerAuthCallout in nats-server's configuration
// syntax, inside the authorization block ("" without an issuer).
func (a *Auth) serverCalloutConfig() string {
	c := a.ServerAuthCallout()
	if c == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("  # Users it does not know: the gateway answers (events credentials).\n")
	fmt.Fprintf(&b, "  auth_callout {\n    issuer: %s\n    account: %q\n    auth_users: [\n", c.Issuer, c.Account)
	for _, u := range c.AuthUsers {
		fmt.Fprintf(&b, "      %s\n", u)
	}
	b.WriteString("    ]\n  }\n")
	return b.String()
}

// AuthCalloutSubject is where nats-server asks the auth callout.
const AuthCalloutSubject = server.AuthCalloutSubject

// authCalloutReplies are the subjects nats-server awaits the callout's
// answers on.
const authCalloutReplies = "$SYS._INBOX.>"

// EventsConsumerName is the durable consumer of events credential name in
// project: the only consumer on StreamEvents that credential may read.
func EventsConsumerName(project, name string) string { return "ev_" + project + "_" + name }

// EventsInboxPrefix is the inbox prefix of an events credential's
// connections (nats.CustomInboxPrefix, natscli --inbox-prefix): the only
// inboxes it may subscribe to.
func EventsInboxPrefix(id string) string { return InboxPrefix("ev_" + id) }

// EventsFilter is the filter of project's events on StreamEvents.
func EventsFilter(project string) string { return join(EventRoot, project, ">") }

// EventsDeliverSubject is where the durable consumer of events
// credential id pushes its project's events: in the credential's own
// inboxes, which nobody else may subscribe to.
func EventsDeliverSubject(id string) string { return EventsInboxPrefix(id) + ".events" }

// EventsPermission is what the connection of events credential id of
// project may do: subscribe to the project's events and to its own
// inboxes, where its durable consumer (made by the gateway, filtered to
// the project's events, acks none) delivers; publish nothing at all. Not
// even JetStream's API: the server answers an API request, a pull or an
// ack on the reply subject its sender chose, unchecked, so a user that may
// publish any of them may have JetStream publish into any subject,
// another project's events or the audit stream included.
func EventsPermission(project, id string) Permission {
	return Permission{Subscribe: []string{EventsFilter(project), EventsInboxPrefix(id) + ".>"}}
}

// Dial opens another connection to b's server (in process, or at its URL
// with its TLS), authenticated by opts instead of b's user.
func (b *Bus) Dial(name string, opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * 1e6)}, opts...)
	url := b.cfg.URL
	if b.inProc != nil {
		opts = append(opts, nats.InProcessServer(b.inProc))
		url = b.inProc.ClientURL()
	} else if b.cfg.CAFile != "" {
		opts = append(opts, nats.RootCAs(b.cfg.CAFile))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s as %s: %w", url, name, err)
	}
	return nc, nil
}
