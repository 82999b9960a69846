package region

import (
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/fx"

	"atoll.dev/libs/envelope"
	"atoll.dev/services/admission"
	"atoll.dev/services/propagator"
)

// InitialKEK is the id of the key-encryption key a region starts with.
const InitialKEK = "k1"

// prepareKEK makes the region's key-encryption key (kept across runs of
// the same directory), placed as production places it: the private key in
// the propagator's directory only (KEKDir), the public key in admission's
// file only (KEKPublicFile).
func (r *Region) prepareKEK() error {
	r.KEKDir = filepath.Join(r.dir, "kek", "propagator")
	r.KEKPublicFile = filepath.Join(r.dir, "kek", "admission", "kek.pub")
	if _, err := os.Stat(r.KEKPublicFile); err == nil {
		return nil
	}
	return r.AddKEK(InitialKEK)
}

// AddKEK makes a new key-encryption key id and puts it in use, as an
// operator rotating the key does before `atoll-admin rotate-kek`: its
// private key joins the propagator's directory (the old ones stay), and
// its public key replaces admission's file. Both are followed by the
// running replicas without a restart (within envelope.CheckEvery).
func (r *Region) AddKEK(id string) error {
	tmp, err := os.MkdirTemp(r.dir, ".kek-")
	if err != nil {
		return fmt.Errorf("region kek: %w", err)
	}
	defer os.RemoveAll(tmp) //nolint:errcheck // a temporary directory
	if err := envelope.GenerateKEK(tmp, id); err != nil {
		return fmt.Errorf("region kek: %w", err)
	}
	for _, d := range []string{r.KEKDir, filepath.Dir(r.KEKPublicFile)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("region kek: %w", err)
		}
	}
	if err := os.Rename(filepath.Join(tmp, envelope.PrivateFile(id)), filepath.Join(r.KEKDir, envelope.PrivateFile(id))); err != nil {
		return fmt.Errorf("region kek: %w", err)
	}
	if err := os.Rename(filepath.Join(tmp, envelope.PublicFile(id)), r.KEKPublicFile); err != nil {
		return fmt.Errorf("region kek: %w", err)
	}
	return nil
}

// RemoveKEK removes the private key id from the propagator's directory,
// as an operator does once rotate-kek reports it unreferenced.
func (r *Region) RemoveKEK(id string) error {
	if err := os.Remove(filepath.Join(r.KEKDir, envelope.PrivateFile(id))); err != nil {
		return fmt.Errorf("region kek: %w", err)
	}
	return nil
}

// kekOptions gives a replica run in process its service's key, as the
// flags give a process (kekEnv): admission the public key file, the
// propagator the private keys; every other service nothing.
func (r *Region) kekOptions(service string) (fx.Option, error) {
	switch service {
	case "admission":
		s, err := envelope.LoadSealer(r.KEKPublicFile)
		if err != nil {
			return nil, err
		}
		cfg := admission.DefaultConfig()
		cfg.Sealer = s
		return fx.Supply(cfg), nil
	case "propagator":
		kr, err := envelope.LoadKeyring(r.KEKDir)
		if err != nil {
			return nil, err
		}
		return fx.Supply(&propagator.Config{Keyring: kr}), nil
	}
	return fx.Options(), nil
}

// kekEnv is kekOptions for a replica run as a process.
func (r *Region) kekEnv(service string) []string {
	switch service {
	case "admission":
		return []string{"ATOLL_ADMISSION_KEK_PUBLIC=" + r.KEKPublicFile}
	case "propagator":
		return []string{"ATOLL_PROPAGATOR_KEK_DIR=" + r.KEKDir}
	}
	return nil
}
