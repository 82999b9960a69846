package bus

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Auth is a region's NATS users (Users): each an nkey whose seed lives in
// its own file in a directory, the user's credentials file. The server's
// configuration holds only the public keys and the permissions (Grants),
// so it may be shown and committed; a seed file is given to its service
// alone (a Kubernetes Secret, a mounted file, Config.NKeyFile).
type Auth struct {
	dir    string
	keys   map[string]string // user -> public nkey
	issuer string            // the events issuer's public key (eventcreds.go)
}

// credsHeader starts the first line of a credentials file; the user's name
// follows it. nats.go's seed parser skips the line.
const credsHeader = "# atoll nats user: " //nolint:gosec // G101: a comment line's prefix, no credential

// CreateAuth loads the users' credentials from dir, creating any that are
// missing: dir with mode 0700, each file with mode 0600.
func CreateAuth(dir string) (*Auth, error) { return loadAuth(dir, true) }

// LoadAuth loads the users' credentials from dir; a missing one is an error.
func LoadAuth(dir string) (*Auth, error) { return loadAuth(dir, false) }

func loadAuth(dir string, create bool) (*Auth, error) {
	if create {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("nats credentials: %w", err)
		}
	}
	a := &Auth{dir: dir, keys: map[string]string{}}
	for _, u := range Users() {
		path := a.CredentialsFile(u)
		if create {
			if err := writeCredentials(path, u); err != nil {
				return nil, err
			}
		}
		name, pub, err := readCredentials(path)
		if err != nil {
			return nil, err
		}
		if name != u {
			return nil, fmt.Errorf("nats credentials %s: for user %q, want %q", path, name, u)
		}
		a.keys[u] = pub
	}
	if err := a.loadIssuer(create); err != nil {
		return nil, err
	}
	return a, nil
}

// writeCredentials creates user's credentials file at path unless it exists.
func writeCredentials(path, user string) error {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return fmt.Errorf("nats credentials for %s: %w", user, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return fmt.Errorf("nats credentials for %s: %w", user, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // G304: the credentials file the operator named
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nats credentials: %w", err)
	}
	_, werr := fmt.Fprintf(f, "%s%s\n%s\n", credsHeader, user, seed)
	if err := errors.Join(werr, f.Close()); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("nats credentials %s: %w", path, err)
	}
	return nil
}

// readCredentials returns the user and public key of a credentials file.
func readCredentials(path string) (user, public string, err error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the credentials file the operator named
	if err != nil {
		return "", "", fmt.Errorf("nats credentials: %w", err)
	}
	defer clear(b)
	line, _, _ := bytes.Cut(b, []byte("\n"))
	name, ok := strings.CutPrefix(string(line), credsHeader)
	if !ok || name == "" {
		return "", "", fmt.Errorf("nats credentials %s: no %q line", path, strings.TrimSpace(credsHeader))
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return "", "", fmt.Errorf("nats credentials %s: %w", path, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return "", "", fmt.Errorf("nats credentials %s: not a user nkey seed", path)
	}
	return strings.TrimSpace(name), pub, nil
}

// isAtollCredentials reports whether path starts like a credentials file
// of CreateAuth's.
func isAtollCredentials(path string) bool {
	f, err := os.Open(path) //nolint:gosec // G304: the credentials file the operator named
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, len(credsHeader))
	n, _ := io.ReadFull(f, head)
	return string(head[:n]) == credsHeader
}

// CredentialsUser returns the user a credentials file authenticates.
func CredentialsUser(path string) (string, error) {
	u, _, err := readCredentials(path)
	return u, err
}

// Dir is the directory of the credentials files.
func (a *Auth) Dir() string { return a.dir }

// CredentialsFile is the path of user's credentials file (Config.NKeyFile).
func (a *Auth) CredentialsFile(user string) string { return filepath.Join(a.dir, user+".nk") }

// PublicKey is user's public nkey.
func (a *Auth) PublicKey(user string) string { return a.keys[user] }

// permission is user's permission; nil for the admin (anything).
func permission(user string) *Permission {
	g, ok := Grants()[user]
	if !ok {
		return nil
	}
	p := g.Permission(user)
	return &p
}

// ServerUsers returns the users for an embedded server's Options.Nkeys.
func (a *Auth) ServerUsers() []*server.NkeyUser {
	var out []*server.NkeyUser
	for _, u := range Users() {
		nu := &server.NkeyUser{Nkey: a.keys[u]}
		if p := permission(u); p != nil {
			nu.Permissions = &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: p.Publish},
				Subscribe: &server.SubjectPermission{Allow: p.Subscribe},
			}
			if p.Responses {
				nu.Permissions.Response = &server.ResponsePermission{
					MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS,
					Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION,
				}
			}
		}
		out = append(out, nu)
	}
	return out
}

// ServerConfig returns the nats-server configuration of the users: an
// authorization block to include in a server's configuration file. It
// holds public keys only.
func (a *Auth) ServerConfig() string {
	var b strings.Builder
	b.WriteString("# NATS users of an Atoll region, one per service (libs/bus Grants).\n")
	b.WriteString("# Generated by `atoll-admin bootstrap auth`; regenerate rather than edit.\n")
	b.WriteString("authorization {\n  users = [\n")
	list := func(name string, subjects []string) {
		fmt.Fprintf(&b, "        %s: {\n          allow: [\n", name)
		for _, s := range subjects {
			fmt.Fprintf(&b, "            %s\n", strconv.Quote(s))
		}
		b.WriteString("          ]\n        }\n")
	}
	for _, u := range Users() {
		fmt.Fprintf(&b, "    # %s\n    {\n      nkey: %s\n", u, a.keys[u])
		if p := permission(u); p != nil {
			b.WriteString("      permissions: {\n")
			list("publish", p.Publish)
			list("subscribe", p.Subscribe)
			if p.Responses {
				b.WriteString("        allow_responses: true\n")
			}
			b.WriteString("      }\n")
		}
		b.WriteString("    }\n")
	}
	b.WriteString("  ]\n")
	b.WriteString(a.serverCalloutConfig())
	b.WriteString("}\n")
	return b.String()
}

// WriteServerConfig writes ServerConfig to path (mode 0644: no secrets).
func (a *Auth) WriteServerConfig(path string) error {
	// The server configuration holds public keys only, and the NATS server
	// may run as another user.
	if err := os.WriteFile(path, []byte(a.ServerConfig()), 0o644); err != nil { //nolint:gosec // G306: public keys only
		return fmt.Errorf("write nats configuration: %w", err)
	}
	return nil
}
