package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// Config is the CLI's config file: where the gateway is, the token, and
// the default project.
type Config struct {
	// Server is the gateway's URL.
	Server string `json:"server,omitempty"`
	// Token is the API token or JWT.
	Token string `json:"token,omitempty"`
	// Project is the project of commands run without -p.
	Project string `json:"project,omitempty"`
	// CA holds the PEM certificates of the authorities the gateway's
	// certificate is verified against instead of the system's (login
	// --ca: a region whose CA is its own, such as atoll-dev's).
	CA string `json:"ca,omitempty"`
}

// DefaultConfigPath is $ATOLL_CONFIG, else $XDG_CONFIG_HOME/atoll/config.yaml,
// else ~/.config/atoll/config.yaml.
func DefaultConfigPath() (string, error) {
	if p := os.Getenv(EnvConfig); p != "" {
		return p, nil
	}
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "atoll", "config.yaml"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("config file: %w (pass --config)", err)
	}
	return filepath.Join(home, ".config", "atoll", "config.yaml"), nil
}

// LoadConfig reads the config file; a missing one is an empty Config.
func LoadConfig(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path) //nolint:gosec // G304: the user's own config file, named by --config or the default path
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// SaveConfig writes the config file readable by its owner only (0600), in
// a directory of its own (0700), replacing any earlier one atomically.
func SaveConfig(path string, c Config) error {
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write config: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}
